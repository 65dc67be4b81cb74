"""GSPO iteration time, both sides on the same task and batch.

Per iteration: `batch` prompts x `group` samples, `new_tokens` new tokens each (a random policy almost never samples
an end token, so completions run to the limit), temperature 1.0, full fine-tune (fp32 master weights, bf16 autocast
on a GPU), AdamW lr 1e-6, grad-norm clip 1.0, one optimizer step per iteration, no KL term, clip range 3e-4 / 4e-4.
The reward is `gpu_inputs.gspo_reward` of the answer's text on both sides.

- ours: `synth_ai.backend.trainers.rl.run_rl`, the function the backend's job worker calls, with the built-in
  rollout engine; the task app (`gpu_task_app.py`) is served over HTTP by uvicorn in a thread, and the rollouts go
  trainer -> task app -> policy server, as in a real job, with our defaults (activation checkpointing on with
  CUDA). Iteration time = the gap between successive
  `rl.train.step` events; rollout and update seconds are the event's own `rollout_s` / `train_s`.
- baseline: TRL `GRPOTrainer` with `importance_sampling_level="sequence"` (TRL's GSPO), generation with
  `model.generate`, the reward called in process, gradient checkpointing on (TRL's default). Iteration time =
  the gap between successive `on_step_end` callbacks; rollout seconds = time spent in `_generate_and_score_completions` (update = the rest).

The first iteration is a warm-up and is not counted. Trained tokens per iteration = samples x (prompt tokens + mean
completion tokens); tokens/s in the table = those tokens / update seconds (the trainer alone, as prime-rl reports).

`run_update` is the trainer alone: our `GSPOTrainer.train`, the update `run_rl` calls each iteration, over
`samples` synthetic samples (random token ids) of a `prompt`-token prompt and a `completion`-token completion, in
groups of `group` samples sharing a prompt (1: every prompt different), one optimizer step over them, with the
`[training]` keys the step sets (gpu_plan: none for the new defaults, `OLD_PATH` for the old one). The first
`warmup` updates are not timed. TRL has no trainer-only mode, so these rows have no TRL side.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from gpu_inputs import gspo_prompt, gspo_reward, prompt_tokens

APP_KEY = "sk_env_gpu_kit_bench_000000000000"
HYPER = {"learning_rate": 1e-6, "epsilon_low": 3e-4, "epsilon_high": 4e-4, "max_grad_norm": 1.0, "seed": 1}


def summary(iterations: list[tuple[float, float | None, float | None, float]], samples: int,
            prompt_len: float) -> dict[str, Any]:
    """From timed iterations (seconds, rollout s, update s, mean completion tokens): the row's numbers."""
    if not iterations:
        raise RuntimeError("no iteration after the warm-up finished")
    seconds = statistics.median(i[0] for i in iterations)
    updates = [i[2] for i in iterations if i[2] is not None]
    rollouts = [i[1] for i in iterations if i[1] is not None]
    completion = statistics.fmean(i[3] for i in iterations)
    tokens = samples * (prompt_len + completion)
    update_s = statistics.median(updates) if updates else None
    return {"step_s": seconds, "rollout_s": statistics.median(rollouts) if rollouts else None,
            "update_s": update_s, "tokens_per_iteration": round(tokens), "completion_tokens_mean": completion,
            "prompt_tokens": prompt_len, "samples": samples, "iterations_timed": len(iterations),
            "tokens_per_s": tokens / update_s if update_s else None,
            "iteration_times": [round(i[0], 4) for i in iterations]}


def rl_config(job: dict[str, Any]) -> dict[str, Any]:
    n = job["batch"] * job["group"]
    return {
        "algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"},
        "model": {"base": job["model_path"], "trainer_mode": job.get("mode", "full"), "label": "gpu-kit"},
        "rollout": {"env_name": "gpu_kit_bench", "policy_name": "gpu-kit", "max_turns": 1, "episodes_per_batch": n,
                    "max_concurrent_rollouts": n,
                    "policy_config": {"temperature": 1.0, "max_tokens": job["new_tokens"]}},
        "training": {"num_epochs": 1, "iterations_per_epoch": job["iterations"], "max_turns": 1,
                     "batch_size": job["batch"], "group_size": job["group"], "learning_rate": HYPER["learning_rate"],
                     "weight_sync_interval": 1, "log_interval": 1, "seed": HYPER["seed"],
                     "checkpoint_interval": job["iterations"] + 1, "max_grad_norm": HYPER["max_grad_norm"],
                     "clip_epsilon_low": HYPER["epsilon_low"], "clip_epsilon_high": HYPER["epsilon_high"]},
    }


def run_ours(job: dict[str, Any]) -> dict[str, Any]:
    from gpu_task_app import build_config

    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl import run_rl
    from synth_ai.taskapp import create_task_app
    from synth_ai.taskapp.serving import running_in_background

    steps: list[tuple[float, dict[str, Any]]] = []
    started: dict[str, Any] = {}

    class Reporter:
        def event(self, type, message, data=None, level="info"):  # noqa: A002
            if type == "rl.train.step":
                steps.append((time.perf_counter(), data or {}))
            elif type == "rl.train.started":
                started.update(data or {})

        def metric(self, name, step, value, phase="train"):
            pass

    os.environ["ENVIRONMENT_API_KEY"] = APP_KEY
    with running_in_background(create_task_app(build_config())) as base, \
            tempfile.TemporaryDirectory(prefix="kit-gspo-", dir=job["scratch"]) as work:
        spec = {"job_id": "gpu-kit", "model": job["model_path"], "environment_api_key": APP_KEY,
                "data": {"endpoint_base_url": base, "base_model": job["model_path"], "config": rl_config(job)}}
        run_rl(spec, workdir=Path(work), model_store=ModelStore(Path(work) / "store"), reporter=Reporter(),
               should_stop=lambda: False)
    timed = [(b[0] - a[0], b[1].get("rollout_s"), b[1].get("train_s"), b[1].get("response_tokens_mean") or 0.0)
             for a, b in pairwise(steps)]
    samples = [b[1].get("samples", 0) for b in steps[1:]]
    row = summary(timed, min(samples) if samples else 0, prompt_tokens(Path(job["model_path"]), range(job["batch"])))
    row["reward_mean"] = [s[1].get("reward_mean") for s in steps]
    row["groups_zero_variance"] = sum(s[1].get("groups_zero_variance", 0) for s in steps)
    row["gradient_checkpointing"] = started.get("activation_checkpointing")
    return row


def run_update(job: dict[str, Any]) -> dict[str, Any]:
    import math
    import random

    import torch

    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl.rl_settings import resolve_rl_settings
    from synth_ai.backend.trainers.rl.step import GSPOTrainer
    from synth_ai.backend.trainers.rl.types import Sample

    count, group, prompt, completion = job["samples"], job["group"], job["prompt"], job["completion"]
    config = rl_config({**job, "batch": count // group, "group": group, "new_tokens": completion, "iterations": 1})
    config["training"].update(job["training"])
    if "max_accumulated_minibatch" in job["training"]:  # still one optimizer step over all the samples
        config["training"]["gradient_accumulation_steps"] = -(-count // job["training"]["max_accumulated_minibatch"])
    spec = {"job_id": "gpu-kit", "model": job["model_path"],
            "data": {"endpoint_base_url": "http://127.0.0.1:9", "base_model": job["model_path"], "config": config}}
    with tempfile.TemporaryDirectory(prefix="kit-rl-", dir=job["scratch"]) as work:
        trainer = GSPOTrainer(resolve_rl_settings(spec), ModelStore(Path(work) / "store"), Path(work))
        vocab = len(trainer.tokenizer)
        rng = random.Random(0)
        flat = -math.log(vocab)  # a random policy's log-prob (recomputed on a GPU, where the ratio must be 1)

        def samples() -> list[Sample]:
            prompts = [[rng.randrange(vocab) for _ in range(prompt)] for _ in range(-(-count // group))]
            return [Sample(prompt_ids=list(prompts[i // group]),
                           completion_ids=[rng.randrange(vocab) for _ in range(completion)],
                           old_logprobs=[flat] * completion, advantage=1.0 if i % 2 else -1.0, seed=i // group,
                           rollout_index=i % group) for i in range(count)]

        seconds, steps = [], 0
        for _ in range(job["warmup"] + job["steps"]):
            batch = samples()
            started = time.perf_counter()
            steps += trainer.train(batch).steps
            if torch.cuda.is_available():  # its optimizer step is the last work queued: wait for it
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - started)
        checkpointing = bool(trainer.policy.activation_checkpointing)
    timed = seconds[job["warmup"]:]
    update_s = statistics.median(timed)
    return {"step_s": update_s, "update_s": update_s, "steps_timed": len(timed), "samples": count,
            "optimizer_steps": steps, "activation_checkpointing": checkpointing,
            "tokens_per_s": count * (prompt + completion) * len(timed) / sum(timed),
            "step_times": [round(t, 4) for t in timed]}


def run_trl(job: dict[str, Any]) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from gpu_sft import trl_clock, trl_model
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    cuda = torch.cuda.is_available()
    tokenizer = AutoTokenizer.from_pretrained(job["model_path"], local_files_only=True)
    model = trl_model(job["model_path"], torch.float32)
    batch, group = job["batch"], job["group"]
    rows = [{"prompt": [{"role": "user", "content": gspo_prompt(seed)}]} for seed in range(job["iterations"] * batch)]

    def reward(completions, **_):
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [gspo_reward(t) for t in texts]

    ends: list[float] = []
    generation: list[float] = []
    lengths: list[float] = []

    class Lengths(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                lengths.append(float(logs["completions/mean_length"]))

    with tempfile.TemporaryDirectory(prefix="kit-gspo-trl-", dir=job["scratch"]) as out:
        # gradient checkpointing on: TRL's default (its configs' base), and our update's on CUDA, so like for like
        config = GRPOConfig(
            output_dir=out, importance_sampling_level="sequence", loss_type="grpo", beta=0.0,
            epsilon=HYPER["epsilon_low"], epsilon_high=HYPER["epsilon_high"], num_generations=group,
            per_device_train_batch_size=batch * group, gradient_accumulation_steps=1, steps_per_generation=1,
            num_iterations=1, max_completion_length=job["new_tokens"], temperature=1.0,
            learning_rate=HYPER["learning_rate"], lr_scheduler_type="constant", max_grad_norm=HYPER["max_grad_norm"],
            max_steps=job["iterations"], optim="adamw_torch_fused" if cuda else "adamw_torch", use_cpu=not cuda,
            bf16=cuda, fp16=False, gradient_checkpointing=True, report_to=[], save_strategy="no", logging_steps=1,
            seed=HYPER["seed"], shuffle_dataset=False, disable_tqdm=True, dataloader_num_workers=0,
            disable_dropout=True)
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=Dataset.from_list(rows),
                              processing_class=tokenizer, callbacks=[trl_clock(ends), Lengths()])
        _time_generation(trainer, generation, cuda)
        trainer.train()
    gaps = [b - a for a, b in pairwise(ends)]
    timed = [(gap, gen, gap - gen if gen is not None else None, length)
             for gap, gen, length in zip(gaps, _pad(generation[1:], len(gaps)), _pad(lengths[1:], len(gaps), 0.0))]
    row = summary(timed, batch * group, prompt_tokens(Path(job["model_path"]), range(batch)))
    row["gradient_checkpointing"] = bool(config.gradient_checkpointing)
    return row


def _time_generation(trainer: Any, seconds: list[float], cuda: bool) -> None:
    """Record the time of each call of TRL's generation-and-scoring step (the rollout part of an iteration)."""
    import torch

    inner = getattr(trainer, "_generate_and_score_completions", None)
    if inner is None:  # another TRL version: the split stays unknown, the iteration time is still measured
        return

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = inner(*args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
        return result

    trainer._generate_and_score_completions = timed


def _pad(values: list[Any], length: int, fill: Any = None) -> list[Any]:
    return (values + [fill] * length)[:length]
