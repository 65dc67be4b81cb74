"""The GPU kit: measure our SFT and GSPO trainers against TRL on real-size Qwen3 shapes, within a time budget.

Run it through `bench/gpu/run.sh` (it installs the carried wheels first); see bench/gpu/README.md. This process
only plans, spawns and writes: every step (the tokenizer and SFT rows, each model, each measurement) runs in
`gpu_worker.py` in its own process, so one failure (an out-of-memory error, TRL missing, a crash, a step that overruns)
becomes one error row and the kit goes on. results.json and results.md in `--out` are rewritten after every step.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gpu_plan as planning
import gpu_report as report
from gpu_inputs import QWEN_REGULAR_TOKENS
from gpu_shapes import SMOKE

HERE = Path(__file__).resolve().parent
LOG_TAIL = 4000


class Kit:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        self.started = float(os.environ.get("KIT_STARTED") or time.time())  # run.sh's start: wheels included
        self.budget = args.budget_s or (planning.SMOKE_BUDGET_S if args.smoke else planning.GPU_BUDGET_S)
        self.scratch = Path(tempfile.mkdtemp(prefix="synth-gpu-kit-", dir=args.scratch or _scratch_root(args.smoke)))
        self.rows: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.environment: dict[str, Any] = {}
        self.models: dict[str, str | None] = {}  # model -> folder, or None when its build failed
        self.data: dict[int, dict[str, Any]] = {}
        self.log = open(self.out / "kit.log", "w")  # noqa: SIM115 - closed in close()

    # Time ---------------------------------------------------------------------------------------------------------
    def left(self) -> float:
        return self.budget - (time.time() - self.started) - planning.RESERVE_S

    # Workers ------------------------------------------------------------------------------------------------------
    def work(self, name: str, job: dict[str, Any], limit: float) -> dict[str, Any]:
        """Run one worker job with a time limit; its RESULT, or an error naming what went wrong."""
        limit = max(1.0, min(limit, self.left()))
        started = time.monotonic()
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            process = subprocess.Popen([sys.executable, str(HERE / "gpu_worker.py"), json.dumps(job)], stdout=out,
                                       stderr=err, cwd=HERE.parents[1], env=_worker_env(self.args.smoke),
                                       start_new_session=True)
            try:
                process.wait(timeout=limit)
                timed_out = False
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # the worker and its children (rollout process, ...)
                process.wait()
                timed_out = True
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        seconds = time.monotonic() - started
        result = next((json.loads(line[len("RESULT "):]) for line in reversed(stdout.splitlines())
                       if line.startswith("RESULT ")), None)
        if timed_out:
            result = {"error": f"stopped after {limit:.0f} s (its time limit within the budget)"}
        elif result is None:
            last = (stderr.strip().splitlines() or ["no output"])[-1]
            result = {"error": f"worker exited {process.returncode} without a result: {last[:300]}"}
        failed = "error" in result
        self.log.write(f"== {name}: {seconds:.1f} s, {'error: ' + result['error'] if failed else 'ok'}\n"
                       f"{(stdout + stderr)[-(LOG_TAIL if failed else 600):]}\n")
        self.log.flush()
        result["wall_s"] = round(seconds, 1)
        return result

    # Steps --------------------------------------------------------------------------------------------------------
    def prepare(self, steps: list[planning.Step]) -> bool:
        """Environment facts, the tokenizer and the SFT rows (one worker); False when that failed."""
        regular = SMOKE.vocab - 64 if self.args.smoke else QWEN_REGULAR_TOKENS
        data = [{"seq_len": seq_len, "rows": rows, "path": str(self.scratch / f"sft-{seq_len}.jsonl")}
                for seq_len, rows in planning.data_needs(steps).items()]
        first = self.model_job(steps[0].model) if steps else None  # built here: one process start fewer
        result = self.work("prepare", {"kind": "prepare", "tokenizer": str(self.scratch / "tokenizer"),
                                       "regular_tokens": regular, "data": data, "model": first},
                           150 + (planning.TIMES[steps[0].model]["build"][1] if steps else 0))
        if "error" in result:
            self.notes.append(f"preparation failed, nothing measured: {result['error']}")
            return False
        if first is not None:
            self.register(first["model"], result.pop("model"))
        made = result.pop("data")
        self.environment = {k: v for k, v in result.items() if k not in ("wall_s", "peak_memory_gib",
                                                                           "peak_memory_kind")}
        for need in data:
            self.data[need["seq_len"]] = {**made[str(need["seq_len"])], "path": need["path"]}
        return True

    def model_job(self, name: str) -> dict[str, Any]:
        return {"kind": "model", "model": name, "tokenizer": str(self.scratch / "tokenizer"),
                "model_path": str(self.scratch / "models" / name)}

    def model(self, name: str) -> str | None:
        if name not in self.models:
            job = self.model_job(name)
            self.register(name, self.work(f"model {name}", job, planning.TIMES[name]["build"][1]))
        return self.models[name]

    def register(self, name: str, made: dict[str, Any]) -> None:
        self.models[name] = None if "error" in made else self.model_job(name)["model_path"]
        if "error" in made:
            self.notes.append(f"{name}: building the model failed ({made['error']}); its rows are errors")
        else:
            self.notes.append(f"{name}: {made['parameters']:,} parameters, random bf16 weights, built in "
                              f"{made.get('build_s', made.get('wall_s', 0)):.0f} s")

    def measure(self, step: planning.Step) -> dict[str, Any]:
        row = {"id": step.id, "pair": step.pair, "bench": step.bench, "side": step.side, "model": step.model,
               "mode": step.mode, "seq_len": step.seq_len, **step.job}
        folder = self.model(step.model)
        data = self.data.get(step.seq_len, {}) if step.bench == "sft" else {}
        if folder is None:
            row.update(status="error", error="model build failed")
            return row
        job = {**step.job, "kind": step.bench, "side": step.side, "model_path": folder,
               "scratch": str(self.scratch)}
        if step.bench == "sft":
            job.update(data=data["path"], data_tokens_mean=data["tokens_mean"])
        missing = self.missing(step)
        if missing:  # said without a worker's start (torch's import alone costs seconds)
            result = {"error": f"{missing} is not installed here (No module named '{missing}')"}
            self.log.write(f"== {step.id}: 0.0 s, error: {result['error']} (found before starting a worker)\n")
        else:
            result = self.work(step.id, job, step.max_s)
        hint = data.get("tokens_mean") if step.bench == "sft" else \
            (result.get("prompt_tokens") or 0) + (result.get("completion_tokens_mean") or 0) or None
        report.finish_row(row, result, self.environment.get("bf16_peak_flops"), hint)
        return row

    @staticmethod
    def missing(step: planning.Step) -> str | None:
        """The first package a TRL step needs that this Python lacks (the workers run the same Python and path)."""
        needs = ("trl", "datasets") if step.side == "trl" else ()
        return next((name for name in needs if importlib.util.find_spec(name) is None), None)

    def skip(self, step: planning.Step, why: str) -> None:
        self.rows.append({"id": step.id, "pair": step.pair, "bench": step.bench, "side": step.side,
                          "model": step.model, "mode": step.mode, "seq_len": step.seq_len, **step.job,
                          "status": "skipped", "note": why})

    # The run ------------------------------------------------------------------------------------------------------
    def run(self, steps: list[planning.Step]) -> None:
        self.save()
        if not self.prepare(steps):
            self.save()
            return
        self.save()
        device = self.environment.get("device", "?")
        for index, step in enumerate(steps):
            partner = steps[index + 1] if index + 1 < len(steps) and steps[index + 1].pair == step.pair else None
            if not any(r["id"] == step.id for r in self.rows):
                build = 0.0 if step.model in self.models else planning.TIMES[step.model]["build"][0]
                need = build + step.min_s + (partner.min_s if partner else 0.0)
                if self.left() < need:
                    self.skip(step, f"budget spent: {max(0.0, self.left()):.0f} s left, needs about {need:.0f} s")
                    if partner:
                        self.skip(partner, "budget spent: its pair was skipped")
                else:
                    self.rows.append(self.measure(step))
            if partner is None:
                print(report.pair_line(self.rows, step.pair, device, self.environment.get("gpu_memory_gib")),
                      flush=True)
            self.save()

    def save(self) -> None:
        document = {
            "kit": {"mode": "smoke" if self.args.smoke else "gpu", "budget_s": self.budget,
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
                    "spent_s": round(time.time() - self.started, 1), "flops": report.FLOPS_FORMULA,
                    "command": " ".join(sys.argv[1:])},
            "environment": self.environment, "rows": self.rows, "anchors": report.ANCHORS,
            "notes": self.notes + [f"SFT rows at {k} tokens: {v['rows']} rows of {v['tokens_min']}-{v['tokens_max']} "
                                   f"tokens (mean {v['tokens_mean']:.0f})" for k, v in sorted(self.data.items())]}
        report.write(self.out, document)

    def close(self) -> None:
        self.log.close()
        if not self.args.keep_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _scratch_root(smoke: bool) -> str:
    """Models and checkpoints go to RAM (/dev/shm) on the GPU machine when it has room: its disk is slower."""
    shm = Path("/dev/shm")
    if not smoke and shm.is_dir() and shutil.disk_usage(shm).free > 48 * 2**30:
        return str(shm)
    return tempfile.gettempdir()


def _worker_env(smoke: bool) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "SYNTH_AI_ROLLOUT_ENGINE": "builtin"}
    if smoke:  # the smoke is the CPU run, also on a machine with a GPU
        env["CUDA_VISIBLE_DEVICES"] = ""
    src = str(HERE.parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join([src] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description="Measure our SFT and GSPO trainers against TRL on one GPU.")
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json, results.md, kit.log")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: the same code path, quickly")
    parser.add_argument("--models", default="Qwen3-0.6B,Qwen3-1.7B,Qwen3-4B", help="comma-separated, in order")
    parser.add_argument("--only", default="", help="measure only steps whose id contains this (e.g. sft/Qwen3-0.6B)")
    parser.add_argument("--budget-s", type=float, default=None, help="total seconds (default 480; smoke 170)")
    parser.add_argument("--scratch", default=None, help="where models and checkpoints go (default /dev/shm or tmp)")
    parser.add_argument("--keep-scratch", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in planning.TIMES or m == "smoke"]
    if unknown and not args.smoke:
        parser.error(f"unknown model(s) {unknown}; choose from {[m for m in planning.TIMES if m != 'smoke']}")
    steps = planning.smoke_plan() if args.smoke else planning.gpu_plan(models)
    steps = [s for s in steps if args.only in s.id]
    kit = Kit(args)
    try:
        kit.run(steps)
    finally:
        kit.save()
        kit.close()
    ok = sum(r.get("status") == "ok" for r in kit.rows)
    print(f"results: {args.out / 'results.json'}, {args.out / 'results.md'} ({ok} ok, "
          f"{sum(r.get('status') == 'error' for r in kit.rows)} errors, "
          f"{sum(r.get('status') == 'skipped' for r in kit.rows)} skipped) in {time.time() - kit.started:.0f} s")
    if not args.smoke:
        print(report.markdown(json.loads((args.out / "results.json").read_text())))


if __name__ == "__main__":
    main()
