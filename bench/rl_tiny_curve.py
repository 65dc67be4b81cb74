"""Bench: does GSPO learn? The reward curve of examples/configs/rl_tiny_local.toml on this machine's CPU.

Runs the config's GSPO job in this process with `synth_ai.backend.trainers.rl.run_rl` (the function the backend's
job worker calls), against the bundled color-quiz task app served on a free 127.0.0.1 port in a background thread,
with the tiny Qwen3 built once into bench/.cache/rl-data/. For each `--seeds` value ([training].seed) it prints the
per-iteration mean reward, the eval returns, the wall time, and then

    rl_tiny_curve: ours X reward, baseline Y reward, ratio Z

where ours = the mean reward of the last 3 iterations, baseline = the mean reward of the first 3 (the policy
before it has learned much), averaged over seeds. One torch thread unless OMP_NUM_THREADS says otherwise.

Reproduce from the repository root:

    .venv/bin/python bench/rl_tiny_curve.py               # seeds 1 and 2
    .venv/bin/python bench/rl_tiny_curve.py --seeds 1 --iterations 24
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = REPO / "bench" / ".cache" / "rl-data"
CONFIG = REPO / "examples" / "configs" / "rl_tiny_local.toml"
ENV_KEY = "sk_env_bench_rl_curve_0000"


class Collect:
    def __init__(self) -> None:
        self.metrics: dict[str, dict[int, float]] = {}

    def event(self, type: str, message: str, data: dict[str, Any] | None = None, level: str = "info") -> None:  # noqa: A002
        if type in ("rl.train.step", "rl.eval.summary", "rl.rollouts.failed"):
            print(f"  {message}", flush=True)

    def metric(self, name: str, step: int, value: float, phase: str = "train") -> None:
        self.metrics.setdefault(name, {})[step] = value


def run_once(seed: int, iterations: int | None, task_url: str) -> dict[str, Any]:
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl import run_rl

    config = tomllib.loads(CONFIG.read_text())
    config["training"]["seed"] = seed
    if iterations:
        config["training"]["iterations_per_epoch"] = iterations
    spec = {"job_id": f"bench-seed{seed}", "data": {"endpoint_base_url": task_url, "config": config,
                                                    "base_model": config["model"]["base"]}}
    collect = Collect()
    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        run_rl(spec, workdir=Path(work), model_store=ModelStore(DATA_DIR), reporter=collect,
               should_stop=lambda: False)
        wall = time.perf_counter() - started
    rewards = [v for _, v in sorted(collect.metrics["reward.mean"].items())]
    evals = [v for _, v in sorted(collect.metrics.get("eval.mean_return", {}).items())]
    return {"seed": seed, "rewards": rewards, "evals": evals, "wall_s": wall,
            "first3": statistics.fmean(rewards[:3]), "last3": statistics.fmean(rewards[-3:])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--iterations", type=int, default=None, help="override iterations_per_epoch")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["ENVIRONMENT_API_KEY"] = ENV_KEY
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.taskapp import create_task_app
    from synth_ai.taskapp.discovery import load_task_app
    from synth_ai.taskapp.serving import running_in_background

    ModelStore(DATA_DIR).resolve("synth-ai/tiny-qwen3")
    app = create_task_app(load_task_app("color-quiz").config_factory())
    results = []
    with running_in_background(app) as task_url:
        for seed in args.seeds:
            print(f"seed {seed}:", flush=True)
            results.append(run_once(seed, args.iterations, task_url))
    for r in results:
        print(json.dumps({"seed": r["seed"], "reward_curve": [round(v, 4) for v in r["rewards"]],
                          "eval": [round(v, 4) for v in r["evals"]], "wall_s": round(r["wall_s"], 1),
                          "first3": round(r["first3"], 4), "last3": round(r["last3"], 4)}))
    ours = statistics.fmean(r["last3"] for r in results)
    baseline = statistics.fmean(r["first3"] for r in results)
    print(f"rl_tiny_curve: ours {ours:.4f} reward, baseline {baseline:.4f} reward, ratio {ours / baseline:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
