"""Bench: seconds per GSPO iteration (rollouts + update), our RL trainer against TRL's `GRPOTrainer` with
`importance_sampling_level="sequence"` (TRL's GSPO).

Both train the same tiny model (`synth-ai/tiny-qwen3`, built once into bench/.cache/rl-data/) on the same task: the
bundled color-quiz app's questions ("What color is the sky?", seeds cycling through its first `--things` things),
scored by the same reward (the app's own `grade`), with the same batch: `--batch` prompts x `--group` samples per
iteration, at most 12 new tokens, temperature 1.0, full fine-tune, AdamW, lr 1e-3, grad-norm clip 1.0, one
optimiser step per iteration, no KL term, clip range 3e-4 / 4e-4, fp32 on CPU, one torch thread each
(OMP_NUM_THREADS=1 unless you set it).

- ours: `synth_ai.backend.trainers.rl.run_rl`, the function the backend's job worker calls, against the color-quiz
  app served over HTTP (rollouts go policy server -> task app -> reward, as in a real job); the app runs as its own
  process, `synth-ai serve color-quiz`, the way users run one (`--task-app-in-process`: in a thread of the
  trainer's process instead, sharing its GIL); time per iteration = the gap between successive `rl.train.step`
  events;
- baseline: TRL `GRPOTrainer` (generation with `model.generate`, the reward function called in process: it does
  no HTTP at all); time per iteration = the gap between successive `on_step_end` callbacks.

The first iteration of each run is a warm-up and is not counted; the median of the rest is the run's figure. Each
side runs in its own process, `--runs` times, interleaved; the median over runs is reported. Ends with
`rl_step: ours X s, baseline Y s, ratio Z` (ratio = baseline seconds / ours: above 1 means ours is faster).

Reproduce from the repository root (TRL comes with the `bench` extra):

    .venv/bin/python bench/rl_step.py                      # 3 runs each, 6 iterations of 4 x 8
    .venv/bin/python bench/rl_step.py --runs 1 --iterations 4
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = REPO / "bench" / ".cache" / "rl-data"
MODEL_ID = "synth-ai/tiny-qwen3"
APP_KEY = "sk_env_rl_step_bench_0000000000"
HYPER = {"learning_rate": 1e-3, "max_tokens": 12, "temperature": 1.0, "epsilon_low": 3e-4, "epsilon_high": 4e-4,
         "max_grad_norm": 1.0, "seed": 1}

sys.path.insert(0, str(REPO / "src"))


def color_app():
    """The bundled color-quiz module (its questions and its `grade`)."""
    from synth_ai.taskapp.discovery import find_task_app, load_task_app

    entry = load_task_app(find_task_app("color-quiz"))
    return entry, sys.modules[entry.config_factory.__module__]


def rl_config(iterations: int, batch: int, group: int, things: int) -> dict:
    return {
        "algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"},
        "model": {"base": MODEL_ID, "trainer_mode": "full", "label": "bench"},
        "rollout": {"env_name": "color_quiz", "policy_name": "bench", "max_turns": 1, "episodes_per_batch": batch * group,
                    "max_concurrent_rollouts": batch * group, "env_config": {"things": things},
                    "policy_config": {"temperature": HYPER["temperature"], "max_tokens": HYPER["max_tokens"]}},
        "training": {"num_epochs": 1, "iterations_per_epoch": iterations, "max_turns": 1, "batch_size": batch,
                     "group_size": group, "learning_rate": HYPER["learning_rate"], "weight_sync_interval": 1,
                     "log_interval": 1, "seed": HYPER["seed"], "checkpoint_interval": iterations + 1,
                     "clip_epsilon_low": HYPER["epsilon_low"], "clip_epsilon_high": HYPER["epsilon_high"]},
    }


@contextmanager
def served_app(in_process: bool) -> Iterator[str]:
    """The color-quiz app's base URL: `synth-ai serve` in its own process, or uvicorn in a thread of this one."""
    from synth_ai.taskapp import create_task_app
    from synth_ai.taskapp.serving import running_in_background

    if in_process:
        entry, _ = color_app()
        with running_in_background(create_task_app(entry.config_factory())) as base:
            yield base
        return
    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="rl-bench-app-") as home:
        exe = Path(sys.executable).parent / "synth-ai"
        argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "synth_ai"]
        env = {**os.environ, "HOME": home, "PYTHONPATH": str(REPO / "src")}
        process = subprocess.Popen([*argv, "serve", "color-quiz", "--port", str(port)], env=env, cwd=home,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"synth-ai serve color-quiz did not start (exit {process.poll()})")
                try:
                    if httpx.get(f"{base}/health", headers={"X-API-Key": APP_KEY}, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            yield base
        finally:
            process.terminate()
            process.wait(timeout=10)


def run_ours(iterations: int, batch: int, group: int, things: int, in_process: bool) -> dict:
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl import run_rl

    steps: list[tuple[float, dict]] = []

    class Reporter:
        def event(self, type, message, data=None, level="info"):  # noqa: A002
            if type == "rl.train.step":
                steps.append((time.perf_counter(), data or {}, time.process_time()))

        def metric(self, name, step, value, phase="train"):
            pass

    os.environ["ENVIRONMENT_API_KEY"] = APP_KEY
    with served_app(in_process) as base, tempfile.TemporaryDirectory(prefix="rl-bench-ours-") as work:
        spec = {"job_id": "bench", "model": MODEL_ID, "environment_api_key": APP_KEY,
                "data": {"endpoint_base_url": base, "base_model": MODEL_ID,
                         "config": rl_config(iterations, batch, group, things)}}
        run_rl(spec, workdir=Path(work), model_store=ModelStore(DATA_DIR), reporter=Reporter(),
               should_stop=lambda: False)
    gaps = [b[0] - a[0] for a, b in zip(steps, steps[1:])]
    rewards = [s[1].get("reward_mean") for s in steps]
    split = [(s[1].get("rollout_s"), s[1].get("train_s")) for s in steps[1:]]
    losses = [s[1].get("loss") for s in steps]
    cpu = [b[2] - a[2] for a, b in zip(steps, steps[1:])]  # this process's CPU seconds (all its threads)
    return {"seconds": gaps, "rewards": rewards, "split": split, "losses": losses, "cpu": cpu}


def run_trl(iterations: int, batch: int, group: int, things: int) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from synth_ai.backend.store.model_store import ModelStore

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    _, app = color_app()
    path = ModelStore(DATA_DIR).resolve(MODEL_ID)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    rows = []
    for seed in range(iterations * batch):  # the seeds our trainer uses: `batch` new ones per iteration
        thing, color = app.question(seed, things)
        rows.append({"prompt": [{"role": "user", "content": f"What color is the {thing}?"}], "thing": thing,
                     "color": color})

    def reward(completions, thing, color, **_):
        # Our inference engine returns the answer without the reasoning block (the tiny model opens every reply
        # with an empty `<think></think>`); strip it the same way so both sides grade the same text.
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        answers = [re.sub(r"<think>.*?</think>", "", t, flags=re.S).replace("<think>", "").strip() for t in texts]
        return [app.grade(a, t, k)["reward"] for a, t, k in zip(answers, thing, color)]

    ends: list[float] = []
    rewards: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                rewards.append(logs["reward"])

    with tempfile.TemporaryDirectory(prefix="rl-bench-trl-") as out:
        config = GRPOConfig(
            output_dir=out, importance_sampling_level="sequence", loss_type="grpo", beta=0.0,
            epsilon=HYPER["epsilon_low"], epsilon_high=HYPER["epsilon_high"], num_generations=group,
            per_device_train_batch_size=batch * group, gradient_accumulation_steps=1, steps_per_generation=1,
            num_iterations=1, max_completion_length=HYPER["max_tokens"], temperature=HYPER["temperature"],
            learning_rate=HYPER["learning_rate"], lr_scheduler_type="constant", max_grad_norm=HYPER["max_grad_norm"],
            max_steps=iterations, optim="adamw_torch", use_cpu=True, bf16=False, fp16=False, report_to=[],
            save_strategy="no", logging_steps=1, seed=HYPER["seed"], shuffle_dataset=False, disable_tqdm=True,
            dataloader_num_workers=0, disable_dropout=True,
        )
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=Dataset.from_list(rows),
                              processing_class=tokenizer, callbacks=[Clock()])
        trainer.train()
    return {"seconds": [b - a for a, b in zip(ends, ends[1:])], "rewards": rewards}


def worker(kind: str, args: argparse.Namespace) -> None:
    if kind == "ours":
        result = run_ours(args.iterations, args.batch, args.group, args.things, args.task_app_in_process)
    else:
        result = run_trl(args.iterations, args.batch, args.group, args.things)
    print("RESULT " + json.dumps(result), flush=True)


def spawn(kind: str, args: argparse.Namespace) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
    argv = [sys.executable, __file__, "--worker", kind, "--iterations", str(args.iterations), "--batch",
            str(args.batch), "--group", str(args.group), "--things", str(args.things)] \
        + (["--task-app-in-process"] if args.task_app_in_process else [])
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-5000:])
    raise SystemExit(f"{kind} run failed (exit {proc.returncode})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=6, help="GSPO iterations per run (the first is warm-up)")
    parser.add_argument("--batch", type=int, default=4, help="prompts (seeds) per iteration")
    parser.add_argument("--group", type=int, default=8, help="samples per prompt")
    parser.add_argument("--things", type=int, default=2, help="how many of color-quiz's things the seeds cycle through")
    parser.add_argument("--task-app-in-process", action="store_true",
                        help="serve the task app in a thread of our trainer's process (default: its own process)")
    parser.add_argument("--worker", choices=["ours", "trl"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.iterations < 2:
        parser.error("--iterations must be at least 2 (the first one is a warm-up)")
    if args.worker:
        worker(args.worker, args)
        return

    print(f"model {MODEL_ID} (cache {DATA_DIR}), {args.iterations} iterations of {args.batch} prompts x {args.group} "
          f"samples, color-quiz with {args.things} things, {HYPER}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}", flush=True)
    if not (DATA_DIR / "models").exists():  # build the tiny model once, untimed
        subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                        "from synth_ai.backend.store.model_store import ModelStore; ModelStore(Path(sys.argv[1]))"
                        ".resolve(sys.argv[2])", str(DATA_DIR), MODEL_ID], check=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO / "src")}, capture_output=True)
    ours, base = [], []
    for run in range(args.runs):
        for kind, bucket in (("ours", ours), ("trl", base)):
            result = spawn(kind, args)
            seconds = statistics.median(result["seconds"])
            bucket.append(seconds)
            curve = ", ".join(f"{r:.3f}" for r in result["rewards"] if r is not None)
            print(f"run {run + 1} {kind:4s}: {seconds:.2f} s per iteration (median of {len(result['seconds'])}; "
                  f"each {', '.join(f'{s:.2f}' for s in result['seconds'])}), mean reward per iteration [{curve}]",
                  flush=True)
            if result.get("split"):  # where our time goes: rollouts (generation + task app) vs the GSPO update
                print("           rollouts / update s: " + ", ".join(f"{r}/{t}" for r, t in result["split"]),
                      flush=True)
                print("           trainer process CPU s per iteration: "
                      + ", ".join(f"{c:.3f}" for c in result["cpu"]), flush=True)
    x, y = statistics.median(ours), statistics.median(base)
    print("reproduce: .venv/bin/python bench/rl_step.py "
          f"--runs {args.runs} --iterations {args.iterations} --batch {args.batch} --group {args.group} "
          f"--things {args.things}" + (" --task-app-in-process" if args.task_app_in_process else ""))
    print(f"rl_step: ours {x:.2f} s, baseline {y:.2f} s, ratio {y / x:.2f}")


if __name__ == "__main__":
    main()
