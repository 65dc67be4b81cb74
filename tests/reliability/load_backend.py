"""Many concurrent clients against a real embedded backend, each through our own client (`synth_ai.client`) with
its default retry policy (so the server's Retry-After is honoured for real): list files, upload a dataset, create
a job (not started: no worker process), read its events, ask the inference endpoint, list jobs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from reliability.faults_flows import dataset_for, sft_body
from reliability.load_stats import LoadLog, RecordingTransport

from backend_support import TINY_TEXT

from synth_ai.client.resources import SynthAPI, job_id_of
from synth_ai.client.transport import Transport
from synth_ai.errors import SynthError

TINY_MODEL = TINY_TEXT  # built locally, never downloaded


def _timed(log: LoadLog, op: str, call):
    started = time.monotonic()
    result = call()
    log.timed(op, time.monotonic() - started)
    return result


def one_client(name: str, *, api_base: str, key: str, workdir: Path, log: LoadLog, gate: threading.Barrier,
               rounds: int, inference: bool) -> dict[str, int]:
    """One client's session; returns what it created (for the duplicate check)."""
    api = SynthAPI(Transport(api_base, key, http_transport=RecordingTransport(log)))
    made = {"files": 0, "jobs": 0}
    try:
        gate.wait(timeout=120)  # every client starts at once
        for round_ in range(rounds):
            label = f"{name}-r{round_}"
            try:
                _timed(log, "list files", lambda: api.files.list(limit=20))
                dataset = dataset_for(workdir, label)
                doc = _timed(log, "upload", lambda: api.files.upload(dataset, idempotency_key=f"up-{label}"))
                made["files"] += 1
                body = sft_body(doc["id"])
                created = _timed(log, "create job", lambda: api.sft.create(body, idempotency_key=f"job-{label}"))
                made["jobs"] += 1
                job_id = job_id_of(created, "/learning/jobs")
                _timed(log, "events", lambda: api.sft.events(job_id))
                if inference:
                    answer = _timed(log, "inference", lambda: api.transport.post_json(
                        "/inference/v1/chat/completions",
                        {"model": TINY_MODEL, "max_tokens": 4, "temperature": 0,
                         "messages": [{"role": "user", "content": f"Say hi to {label}"}]}))
                    if not answer.get("choices"):
                        log.failed(f"{label}: inference answered without choices")
                _timed(log, "list jobs", lambda: api.sft.list(limit=20))
            except SynthError as exc:
                log.failed(f"{label}: {type(exc).__name__}: {exc.message}")
    finally:
        api.close()
    return made


def run_backend_load(*, api_base: str, key: str, workdir: Path, clients: int, rounds: int,
                     inference: bool) -> tuple[LoadLog, dict]:
    log = LoadLog()
    gate = threading.Barrier(clients)
    results: list[dict[str, int]] = []
    threads = []
    started = time.monotonic()
    for i in range(clients):
        def work(i: int = i) -> None:
            results.append(one_client(f"load-{i:04d}", api_base=api_base, key=key, workdir=workdir, log=log,
                                      gate=gate, rounds=rounds, inference=inference))
        thread = threading.Thread(target=work, name=f"load-client-{i}", daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(timeout=900)
    made = {"files": sum(r["files"] for r in results), "jobs": sum(r["jobs"] for r in results),
            "clients_finished": len(results), "wall_s": round(time.monotonic() - started, 1)}
    return log, made
