"""Bench: seconds from a job event being written to it being on the follower's screen, live stream against polling.

One embedded backend (`synth-ai backend serve`, its own process, temporary data dir, no warm worker). This process
plays the worker: it creates a job in the backend's SQLite, marks it running and writes `--events` events at
random gaps (0.2 to 0.8 s), each carrying the wall-clock time it was written. Two followers watch the same job at
the same time, each in its own thread with its own HTTP connection, each printing every update through the CLI's
line view to an in-memory screen: ours (`follow_job` as `train` runs it: the server-sent-events stream) and the
baseline (synth-ai 0.2.17's way: polling status, events, metrics and timeline every 5 s, `stream=False,
interval=5`). An event's latency is the time from its write to the moment its line was printed. Reports p50 and
p95 for each and ends with `follow_latency: ours X s, baseline Y s, ratio Z` (p50; ratio = baseline / ours).

    python bench/follow_latency.py              # 30 events
    python bench/follow_latency.py --events 10
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

BASELINE_INTERVAL_S = 5.0  # `synth-ai train`'s default --poll-interval in 0.2.17


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_backend(data: Path) -> tuple[subprocess.Popen, str, str]:
    port = free_port()
    env = dict(os.environ, SYNTH_AI_HOME=str(data), OMP_NUM_THREADS="1", SYNTH_AI_BACKEND_WARM_WORKER="0")
    log_file = open(data.parent / "backend.log", "ab")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([sys.executable, "-m", "synth_ai", "backend", "serve", "--port", str(port)],
                            stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the backend did not start; see {data.parent / 'backend.log'}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    key = json.loads((data / "backend_keys.json").read_text())["default"]
    return proc, f"{url}/api", key


def follower(api_base: str, key: str, job_id: str, stream: bool, latencies: list[float]) -> threading.Thread:
    from synth_ai.cli.follow_view import LineView
    from synth_ai.cli.output import Output
    from synth_ai.client.follow import follow_job
    from synth_ai.client.resources import SynthAPI
    from synth_ai.client.transport import Transport

    out = Output()
    from rich.console import Console

    out._out = Console(file=io.StringIO(), width=200)  # the screen
    view = LineView(out)

    def on_update(update) -> None:
        view(update)  # printed: now it is on the screen
        written = (update.data.get("data") or {}).get("written_at") if update.kind == "event" else None
        if isinstance(written, float):
            latencies.append(time.time() - written)

    def run() -> None:
        with Transport(api_base, key) as transport:
            follow_job(SynthAPI(transport).sft, job_id, interval=BASELINE_INTERVAL_S, timeout=600,
                       on_update=on_update, stream=stream)

    return threading.Thread(target=run, name="ours" if stream else "baseline")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from synth_ai.backend.store.db import Database
    from synth_ai.backend.store.job_records import JobStore

    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="follow-latency-"))
    data = root / "home"
    data.mkdir()
    proc, api_base, key = start_backend(data)
    try:
        store = JobStore(Database(data / "backend" / "backend.sqlite3"))
        with store.db.tx() as conn:
            job_id = store.insert(conn, kind="sft", training_type="sft_offline", model="synth-ai/tiny-qwen3",
                                  payload={}, files=[])
        store.transition(job_id, "running")
        ours: list[float] = []
        baseline: list[float] = []
        threads = [follower(api_base, key, job_id, True, ours), follower(api_base, key, job_id, False, baseline)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)  # both connected
        for number in range(args.events):
            time.sleep(rng.uniform(0.2, 0.8))
            store.add_event(job_id, "sft.progress", f"step {number + 1}/{args.events}",
                            {"step": number + 1, "total_steps": args.events, "written_at": time.time()})
        time.sleep(0.5)
        store.transition(job_id, "succeeded")
        for thread in threads:
            thread.join(timeout=60)
        store.db.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    if len(ours) != args.events or len(baseline) != args.events:
        raise SystemExit(f"events seen: ours {len(ours)}, baseline {len(baseline)} of {args.events}")
    for name, values in (("ours (stream)", ours), (f"baseline ({BASELINE_INTERVAL_S:g} s poll)", baseline)):
        log(f"{name}: p50 {statistics.median(values):.3f} s, p95 {percentile(values, 0.95):.3f} s, "
            f"max {max(values):.3f} s over {len(values)} events")
    ours_p50, base_p50 = statistics.median(ours), statistics.median(baseline)
    print(f"follow_latency: ours {ours_p50:.3f} s, baseline {base_p50:.3f} s, ratio {base_p50 / ours_p50:.1f}")


if __name__ == "__main__":
    main()
