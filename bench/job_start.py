"""Bench: seconds from creating an SFT job to its first training step, warm worker against a cold one.

Two embedded backends run side by side on free ports, each with its own data dir (a temporary one) and the tiny
Qwen3 (built once into bench/.cache/job-start-models and linked in): ours as shipped (SYNTH_AI_BACKEND_WARM_WORKER=1,
a worker process with torch, transformers and peft imported waits for the next job) and the baseline with
SYNTH_AI_BACKEND_WARM_WORKER=0 (every job starts `python -m synth_ai.backend.jobs.worker <job_id>` cold, which is how
every job started before the warm worker). Per round, one tiny job on each (ours first), and before each of ours
the bench waits until the replacement warm worker is ready (so no import runs in the background of either side's
timed job). For each job: create (POST /learning/jobs) and start, then poll every 20 ms for the first event, the
first `train.loss` point and the end. Reports medians and the waiting warm worker's RSS, and ends with
`job_start: ours X s, baseline Y s, ratio Z` (baseline / ours, create to first step).

    python bench/job_start.py              # 5 rounds
    python bench/job_start.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

BENCH_DIR = Path(__file__).resolve().parent
MODEL_CACHE = BENCH_DIR / ".cache" / "job-start-models"
TINY = "synth-ai/tiny-qwen3"
POLL_S = 0.02


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def build_tiny() -> Path:
    code = ("import sys; from pathlib import Path; from synth_ai.backend.store.model_store import ModelStore; "
            "print(ModelStore(Path(sys.argv[1])).resolve(sys.argv[2]))")
    out = subprocess.run([sys.executable, "-c", code, str(MODEL_CACHE), TINY], check=True, capture_output=True,
                         text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=900)
    return Path(out.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Backend:
    def __init__(self, root: Path, name: str, warm: bool, model: Path) -> None:
        self.name = name
        self.data = root / name
        target = self.data / "models" / "tiny" / model.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(model, target_is_directory=True)
        self.port = free_port()
        env = dict(os.environ, SYNTH_AI_HOME=str(self.data), OMP_NUM_THREADS="1",
                   SYNTH_AI_BACKEND_WARM_WORKER="1" if warm else "0")
        self.log_file = open(root / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "synth_ai", "backend", "serve", "--port", str(self.port)],
                                     stdout=self.log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {name} backend did not start; see {root / f'{name}.log'}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        key = json.loads((self.data / "backend_keys.json").read_text())["default"]
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{self.port}/api", timeout=60,
                                headers={"Authorization": f"Bearer {key}"})
        self.file_id = ""

    def warm_ready_count(self) -> int:
        try:
            return (self.data / "backend" / "warm_worker.log").read_text(errors="replace").count(": ready after ")
        except OSError:
            return 0

    def warm_rss_mib(self) -> float | None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                if b"synth_ai.backend.jobs.worker\0--warm" in cmdline and \
                        f"SYNTH_AI_HOME={self.data}".encode() in environ:
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            return int(line.split()[1]) / 1024
            except (OSError, ValueError):
                continue
        return None

    def upload(self, path: Path) -> None:
        with open(path, "rb") as handle:
            response = self.api.post("/files", files={"file": (path.name, handle, "application/jsonl")},
                                     data={"purpose": "fine-tune"})
        response.raise_for_status()
        self.file_id = response.json()["id"]

    def run_job(self) -> dict[str, float]:
        body = {"model": TINY, "training_type": "sft_offline", "training_file_id": self.file_id,
                "hyperparameters": {"n_epochs": 1, "total_steps": 4, "per_device_batch": 2, "sequence_length": 64,
                                    "learning_rate": 1e-3, "logging_steps": 1},
                "metadata": {"effective_config": {}}}
        t0 = time.perf_counter()
        job = self.api.post("/learning/jobs", json=body)
        job.raise_for_status()
        job_id = job.json()["id"]
        self.api.post(f"/learning/jobs/{job_id}/start").raise_for_status()
        marks: dict[str, float] = {}
        while True:
            now = time.perf_counter() - t0
            if "event" not in marks and self.api.get(f"/learning/jobs/{job_id}/events",
                                                     params={"limit": 1}).json()["events"]:
                marks["event"] = now
            if "step" not in marks and self.api.get(f"/learning/jobs/{job_id}/metrics",
                                                    params={"name": "train.loss", "limit": 1}).json()["points"]:
                marks["step"] = now
            status = self.api.get(f"/learning/jobs/{job_id}/status").json()["status"]
            if status in {"succeeded", "failed", "cancelled"}:
                if status != "succeeded":
                    raise RuntimeError(f"the {self.name} job {job_id} ended {status}; see {self.data}")
                marks["done"] = time.perf_counter() - t0
                marks.setdefault("step", marks["done"])
                return marks
            if now > 300:
                raise RuntimeError(f"the {self.name} job {job_id} took over 300 s")
            time.sleep(POLL_S)

    def stop(self) -> None:
        self.api.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log_file.close()


def wait_warm(backend: Backend, ready: int) -> None:
    deadline = time.monotonic() + 300
    while backend.warm_ready_count() < ready:
        if time.monotonic() > deadline:
            raise RuntimeError("the warm worker did not become ready in 300 s")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="SFT job create-to-first-step: warm worker vs cold worker")
    parser.add_argument("--rounds", type=int, default=5, help="jobs per side (default 5)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data dirs and logs")
    args = parser.parse_args(argv)

    model = build_tiny()
    root = Path(tempfile.mkdtemp(prefix="synth-job-start-"))
    lines = [json.dumps({"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                                      {"role": "assistant", "content": f"{i} plus {i} is {2 * i}."}]})
             for i in range(8)]
    data = root / "train.jsonl"
    data.write_text("\n".join(lines) + "\n")
    ours_runs: list[dict[str, float]] = []
    base_runs: list[dict[str, float]] = []
    backends: list[Backend] = []
    rss = None
    try:
        ours = Backend(root, "ours", True, model)
        backends.append(ours)
        base = Backend(root, "baseline", False, model)
        backends.append(base)
        for side in backends:
            side.upload(data)
        for n in range(args.rounds):
            wait_warm(ours, n + 1)
            rss = ours.warm_rss_mib() or rss
            ours_runs.append(ours.run_job())
            base_runs.append(base.run_job())
            log(f"round {n + 1}: ours {ours_runs[-1]['step']:.2f} s, baseline {base_runs[-1]['step']:.2f} s")
    finally:
        for side in backends:
            side.stop()
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    def med(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    for name, runs in (("ours", ours_runs), ("baseline", base_runs)):
        each = ", ".join(f"{r['step']:.2f}" for r in runs)
        print(f"{name:9} create -> first event {med(runs, 'event'):.2f} s, first step {med(runs, 'step'):.2f} s "
              f"(runs: {each}), done {med(runs, 'done'):.2f} s")
    print(f"warm worker RSS while waiting: {rss:.0f} MiB" if rss else "warm worker RSS: not seen")
    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs; "
          f"reproduce: python {os.path.relpath(Path(__file__).resolve(), Path.cwd())} --rounds {args.rounds}")
    ours_s, base_s = med(ours_runs, "step"), med(base_runs, "step")
    print(f"job_start: ours {ours_s:.2f} s, baseline {base_s:.2f} s, ratio {base_s / ours_s:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
