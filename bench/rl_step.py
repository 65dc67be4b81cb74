"""Bench: seconds per GSPO iteration (rollouts + update), our RL trainer against TRL's `GRPOTrainer` with
`importance_sampling_level="sequence"` (TRL's GSPO).

Both sides train the same model on the same task, scored by the same reward, with the same batch: `--batch` prompts
x `--group` samples per iteration, temperature 1.0, full fine-tune, AdamW, grad-norm clip 1.0, one optimiser step
per iteration, no KL term, clip range 3e-4 / 4e-4, fp32 on CPU, one torch thread each (OMP_NUM_THREADS=1 unless
you set it). Two sizes (`--size`):

- `tiny` (default): `synth-ai/tiny-qwen3` (0.14M parameters, built once into bench/.cache/rl-data/) on the bundled
  color-quiz app ("What color is the sky?", seeds cycling through its first `--things` things, reward = the app's
  own `grade`), at most 12 new tokens, lr 1e-3. At this size an iteration is mostly Python overhead.
- `mid`: `synth-ai/random-qwen3-34m` (33.6M parameters, random weights, built once into bench/.cache/rl-data/) on
  `bench/prose_task_app.py` (continue a passage of prose; reward = the reply's share of vowels, so a random model's
  groups differ from the first iteration and both sides run every backward pass), 128 new tokens, lr 1e-5. Here
  the model's arithmetic dominates.

- ours: `synth_ai.backend.trainers.rl.run_rl`, the function the backend's job worker calls, against the task app
  served over HTTP (rollouts go policy server -> task app -> reward, as in a real job); the app runs as its own
  process, `synth-ai serve <app>`, the way users run one (`--task-app-in-process`: in a thread of the trainer's
  process instead, sharing its GIL); time per iteration = the gap between successive `rl.train.step` events;
  rollout time = the step's `rollout_s`, update time = its `train_s`;
- async: the same as ours with `[training].max_staleness = --max-staleness` (default 2): asynchronous GSPO, the
  rollouts of the next iterations sampled while this one updates (docs/rl.md); time per iteration measured the
  same way (in steady state it is the slower of the rollouts and the update, not their sum);
- baseline: TRL `GRPOTrainer` (generation with `model.generate`, the reward function called in process: it does
  no HTTP at all; at `mid` without TRL's default gradient checkpointing, which memory here does not need and which
  would recompute every layer's forward during the backward pass); time per iteration = the gap between successive `on_step_end` callbacks; rollout time = its
  `_generate_and_score_completions` (generation and rewards), update time = the rest of the step.

Peak RSS is each side's trainer process (`ru_maxrss`; ours' task app and rollout-sender processes are apart). The
first iteration of each run is a warm-up and is not counted; the median of the rest is the run's figure. Each side
runs in its own process, `--runs` times, interleaved; the median over runs is reported, with samples
per second (`--batch` x `--group` per iteration) of the three sides. Ends with `rl_step async: ours X s, baseline
Y s (sync), ratio Z` and `rl_step: ours X s, baseline Y s, ratio Z` (ratio = baseline seconds / ours: above 1
means ours is faster).

Reproduce from the repository root (TRL comes with the `bench` extra):

    .venv/bin/python bench/rl_step.py                      # tiny: 3 runs each, 6 iterations of 4 x 8
    .venv/bin/python bench/rl_step.py --size mid           # mid: 3 runs each, 4 iterations of 4 x 8, 128 tokens
    .venv/bin/python bench/rl_step.py --size mid --runs 1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
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
APP_KEY = "sk_env_rl_step_bench_0000000000"
HYPER = {"temperature": 1.0, "epsilon_low": 3e-4, "epsilon_high": 4e-4, "max_grad_norm": 1.0, "seed": 1}
# What differs between the sizes: the model, the task app (and its env name), new tokens, learning rate, iterations,
# and whether TRL keeps its default gradient checkpointing (mid: off, as memory is plentiful; it would recompute
# every layer's forward in the backward pass and make the comparison one of settings).
SIZES = {
    "tiny": {"model": "synth-ai/tiny-qwen3", "app": "color-quiz", "env": "color_quiz", "max_tokens": 12,
             "learning_rate": 1e-3, "iterations": 6, "trl_gradient_checkpointing": True},
    "mid": {"model": "synth-ai/random-qwen3-34m", "app": "bench-prose", "env": "bench_prose", "max_tokens": 128,
            "learning_rate": 1e-5, "iterations": 4, "trl_gradient_checkpointing": False},
}

sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("SYNTH_TASK_APP_SEARCH_PATH", str(REPO / "bench"))  # where bench-prose is found


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def task_app(name: str):
    """A task app's entry and module (its questions and its reward function)."""
    from synth_ai.taskapp.discovery import find_task_app, load_task_app

    entry = load_task_app(find_task_app(name))
    return entry, sys.modules[entry.config_factory.__module__]


def rl_config(size: dict, iterations: int, batch: int, group: int, things: int, max_staleness: int = 0) -> dict:
    config = {
        "algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"},
        "model": {"base": size["model"], "trainer_mode": "full", "label": "bench"},
        "rollout": {"env_name": size["env"], "policy_name": "bench", "max_turns": 1,
                    "episodes_per_batch": batch * group, "max_concurrent_rollouts": batch * group,
                    "env_config": {"things": things},
                    "policy_config": {"temperature": HYPER["temperature"], "max_tokens": size["max_tokens"]}},
        "training": {"num_epochs": 1, "iterations_per_epoch": iterations, "max_turns": 1, "batch_size": batch,
                     "group_size": group, "learning_rate": size["learning_rate"], "weight_sync_interval": 1,
                     "log_interval": 1, "seed": HYPER["seed"], "checkpoint_interval": iterations + 1,
                     "clip_epsilon_low": HYPER["epsilon_low"], "clip_epsilon_high": HYPER["epsilon_high"]},
    }
    if max_staleness:
        config["training"]["max_staleness"] = max_staleness
    return config


@contextmanager
def served_app(name: str, in_process: bool) -> Iterator[str]:
    """The task app's base URL: `synth-ai serve` in its own process, or uvicorn in a thread of this one."""
    from synth_ai.taskapp import create_task_app
    from synth_ai.taskapp.serving import running_in_background

    if in_process:
        entry, _ = task_app(name)
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
        process = subprocess.Popen([*argv, "serve", name, "--port", str(port)], env=env, cwd=home,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"synth-ai serve {name} did not start (exit {process.poll()})")
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


def run_ours(args: argparse.Namespace, max_staleness: int = 0) -> dict:
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl import run_rl

    size = SIZES[args.size]
    steps: list[tuple[float, dict, float]] = []

    class Reporter:
        def event(self, type, message, data=None, level="info"):  # noqa: A002
            if type == "rl.train.step":
                steps.append((time.perf_counter(), data or {}, time.process_time()))

        def metric(self, name, step, value, phase="train"):
            pass

    os.environ["ENVIRONMENT_API_KEY"] = APP_KEY
    config = rl_config(size, args.iterations, args.batch, args.group, args.things, max_staleness)
    with served_app(size["app"], args.task_app_in_process) as base, \
            tempfile.TemporaryDirectory(prefix="rl-bench-ours-") as work:
        spec = {"job_id": "bench", "model": size["model"], "environment_api_key": APP_KEY,
                "data": {"endpoint_base_url": base, "base_model": size["model"], "config": config}}
        run_rl(spec, workdir=Path(work), model_store=ModelStore(DATA_DIR), reporter=Reporter(),
               should_stop=lambda: False)
    return {"seconds": [b[0] - a[0] for a, b in zip(steps, steps[1:])],
            "rewards": [s[1].get("reward_mean") for s in steps],
            "rollout_s": [s[1].get("rollout_s") for s in steps[1:]],
            "update_s": [s[1].get("train_s") for s in steps[1:]],
            "cpu": [b[2] - a[2] for a, b in zip(steps, steps[1:])],  # this process's CPU seconds (all its threads)
            "completion_tokens": [s[1].get("response_tokens_mean") for s in steps], "peak_rss_mb": peak_rss_mb()}


def trl_task(size_name: str, rows_needed: int, things: int) -> tuple[list[dict], object]:
    """The rows (prompt and what grading needs) and the reward function TRL trains with: the task app's own."""
    if size_name == "mid":
        _, app = task_app("bench-prose")
        rows = [{"prompt": [{"role": "user", "content": app.prompt_for(seed)}]} for seed in range(rows_needed)]

        def reward(completions, **_):
            return [app.vowel_share(c[0]["content"] if isinstance(c, list) else c) for c in completions]
        return rows, reward
    _, app = task_app("color-quiz")
    rows = []
    for seed in range(rows_needed):  # the seeds our trainer uses: `batch` new ones per iteration
        thing, color = app.question(seed, things)
        rows.append({"prompt": [{"role": "user", "content": f"What color is the {thing}?"}], "thing": thing,
                     "color": color})

    def graded(completions, thing, color, **_):
        # Our inference engine returns the answer without the reasoning block (the tiny model opens every reply
        # with an empty `<think></think>`); strip it the same way so both sides grade the same text.
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        answers = [re.sub(r"<think>.*?</think>", "", t, flags=re.S).replace("<think>", "").strip() for t in texts]
        return [app.grade(a, t, k)["reward"] for a, t, k in zip(answers, thing, color)]
    return rows, graded


def run_trl(args: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from synth_ai.backend.store.model_store import ModelStore

    size = SIZES[args.size]
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    path = ModelStore(DATA_DIR).resolve(size["model"])
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    rows, reward = trl_task(args.size, args.iterations * args.batch, args.things)
    ends: list[float] = []
    cpu: list[float] = []
    rewards: list[float] = []
    rollouts: list[float] = []
    lengths: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())
            cpu.append(time.process_time())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                rewards.append(logs["reward"])
                lengths.append(logs.get("completions/mean_length"))

    with tempfile.TemporaryDirectory(prefix="rl-bench-trl-") as out:
        config = GRPOConfig(
            output_dir=out, importance_sampling_level="sequence", loss_type="grpo", beta=0.0,
            epsilon=HYPER["epsilon_low"], epsilon_high=HYPER["epsilon_high"], num_generations=args.group,
            per_device_train_batch_size=args.batch * args.group, gradient_accumulation_steps=1,
            steps_per_generation=1, num_iterations=1, max_completion_length=size["max_tokens"],
            temperature=HYPER["temperature"], learning_rate=size["learning_rate"], lr_scheduler_type="constant",
            max_grad_norm=HYPER["max_grad_norm"], max_steps=args.iterations, optim="adamw_torch", use_cpu=True,
            bf16=False, fp16=False, report_to=[], save_strategy="no", logging_steps=1, seed=HYPER["seed"],
            shuffle_dataset=False, disable_tqdm=True, dataloader_num_workers=0, disable_dropout=True,
            gradient_checkpointing=size["trl_gradient_checkpointing"],
        )
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=Dataset.from_list(rows),
                              processing_class=tokenizer, callbacks=[Clock()])
        generate_and_score = trainer._generate_and_score_completions

        def timed(*a, **k):  # the rollout part of a step: generation, decoding, rewards, advantages
            started = time.perf_counter()
            try:
                return generate_and_score(*a, **k)
            finally:
                rollouts.append(time.perf_counter() - started)

        trainer._generate_and_score_completions = timed
        trainer.train()
    seconds = [b - a for a, b in zip(ends, ends[1:])]
    return {"seconds": seconds, "rewards": rewards, "rollout_s": rollouts[1:len(ends)],
            "update_s": [round(t - r, 3) for t, r in zip(seconds, rollouts[1:len(ends)])],
            "cpu": [b - a for a, b in zip(cpu, cpu[1:])], "completion_tokens": lengths,
            "peak_rss_mb": peak_rss_mb()}


def worker(kind: str, args: argparse.Namespace) -> None:
    result = run_trl(args) if kind == "trl" else run_ours(args, args.max_staleness if kind == "async" else 0)
    print("RESULT " + json.dumps(result), flush=True)


def spawn(kind: str, args: argparse.Namespace) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
    argv = [sys.executable, __file__, "--worker", kind, "--size", args.size, "--iterations", str(args.iterations),
            "--batch", str(args.batch), "--group", str(args.group), "--things", str(args.things),
            "--max-staleness", str(args.max_staleness)] \
        + (["--task-app-in-process"] if args.task_app_in_process else [])
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-5000:])
    raise SystemExit(f"{kind} run failed (exit {proc.returncode})")


def report_run(run: int, kind: str, result: dict) -> tuple[float, float]:
    """Print one run's figures; returns its median seconds and CPU seconds per iteration."""
    seconds = statistics.median(result["seconds"])
    curve = ", ".join(f"{r:.3f}" for r in result["rewards"] if r is not None)
    lengths = ", ".join(f"{n:.1f}" for n in result["completion_tokens"] if n is not None)
    print(f"run {run} {kind:5s}: {seconds:.2f} s per iteration (median of {len(result['seconds'])}; "
          f"each {', '.join(f'{s:.2f}' for s in result['seconds'])}), mean reward per iteration [{curve}], "
          f"mean completion tokens [{lengths}], peak RSS {result['peak_rss_mb']:.0f} MB", flush=True)
    split = [f"{r:.2f}/{u:.2f}" for r, u in zip(result["rollout_s"], result["update_s"])
             if r is not None and u is not None]
    print(f"           rollout / update s: {', '.join(split)} (medians {statistics.median(result['rollout_s']):.2f} / "
          f"{statistics.median(result['update_s']):.2f})", flush=True)
    print("           trainer process CPU s per iteration: " + ", ".join(f"{c:.2f}" for c in result["cpu"]), flush=True)
    return seconds, statistics.median(result["cpu"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny", help="model and task (see the docstring)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--iterations", type=int, help="GSPO iterations per run, the first one a warm-up "
                        "(default: 6 tiny, 4 mid)")
    parser.add_argument("--batch", type=int, default=4, help="prompts (seeds) per iteration")
    parser.add_argument("--group", type=int, default=8, help="samples per prompt")
    parser.add_argument("--things", type=int, default=2, help="how many of color-quiz's things the seeds cycle through")
    parser.add_argument("--task-app-in-process", action="store_true",
                        help="serve the task app in a thread of our trainer's process (default: its own process)")
    parser.add_argument("--max-staleness", type=int, default=2,
                        help="[training].max_staleness of the asynchronous side (`async`)")
    parser.add_argument("--worker", choices=["ours", "async", "trl"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = SIZES[args.size]
    args.iterations = args.iterations or size["iterations"]
    if args.iterations < 2:
        parser.error("--iterations must be at least 2 (the first one is a warm-up)")
    if args.worker:
        worker(args.worker, args)
        return

    print(f"model {size['model']} (cache {DATA_DIR}), {args.iterations} iterations of {args.batch} prompts x "
          f"{args.group} samples, task app {size['app']}, {size['max_tokens']} new tokens at most, lr "
          f"{size['learning_rate']}, {HYPER}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "  # build the model once, untimed
                    "from synth_ai.backend.store.model_store import ModelStore; ModelStore(Path(sys.argv[1]))"
                    ".resolve(sys.argv[2])", str(DATA_DIR), size["model"]], check=True, cwd=REPO,
                   env={**os.environ, "PYTHONPATH": str(REPO / "src")}, capture_output=True)
    ours, early, base = [], [], []
    for run in range(args.runs):
        for kind, bucket in (("ours", ours), ("async", early), ("trl", base)):
            bucket.append(report_run(run + 1, kind, spawn(kind, args)))
    x, y = statistics.median(s for s, _ in ours), statistics.median(s for s, _ in base)
    z = statistics.median(s for s, _ in early)
    samples = args.batch * args.group
    print(f"samples/s: async (max_staleness={args.max_staleness}) {samples / z:.2f}, sync {samples / x:.2f}, "
          f"TRL {samples / y:.2f}; async / sync {x / z:.2f}, async / TRL {y / z:.2f}")
    cx, cy = statistics.median(c for _, c in ours), statistics.median(c for _, c in base)
    print(f"trainer process CPU s per iteration (less sensitive to a busy machine; ours leaves out its task app and "
          f"rollout-sender processes): ours {cx:.2f}, baseline {cy:.2f}, ratio {cy / cx:.2f}")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"reproduce: .venv/bin/python bench/rl_step.py --size {args.size} "
          f"--runs {args.runs} --iterations {args.iterations} --batch {args.batch} --group {args.group} "
          f"--things {args.things} --max-staleness {args.max_staleness}"
          + (" --task-app-in-process" if args.task_app_in_process else ""))
    print(f"rl_step async: ours {z:.2f} s, baseline {x:.2f} s (sync), ratio {x / z:.2f}")
    print(f"rl_step: ours {x:.2f} s, baseline {y:.2f} s, ratio {y / x:.2f}")


if __name__ == "__main__":
    main()
