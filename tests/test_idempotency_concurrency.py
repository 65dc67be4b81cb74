"""Identical commands started at the same moment make one resource: real `synth-ai train` processes against a real
backend, and the client's key file shared by real processes (`client/idempotency.py`).

The commands reach the backend through a forwarding proxy that holds each upload until all of them have sent
theirs (the fault: commands truly at the same point at once, whatever the machine's speed). A client that lets an
identical command wait for the first one's upload sends one, and the proxy gives up waiting for the others.
Whether unlocked clients then diverge depends on how their reads and writes of the key file interleave, so the
second test forces that interleaving with many writers: it fails whenever one write loses another's entry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

import pytest

from backend_support import TINY_TEXT, BackendProcess, serve_backend
from conftest import REPO_ROOT

CONFIG = REPO_ROOT / "examples" / "configs" / "sft_tiny_local.toml"
DATASET = REPO_ROOT / "examples" / "datasets" / "sft_math_small.jsonl"


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    yield from serve_backend(tmp_path_factory, "idem-backend", tiny=(TINY_TEXT,))


class _UploadGate:
    """Holds uploads until `expected` have arrived; after `give_up_s` without them it opens for good."""

    def __init__(self, expected: int, give_up_s: float = 5.0) -> None:
        self.expected, self.give_up_s = expected, give_up_s
        self.arrived = 0
        self.opened = threading.Event()
        self.lock = threading.Lock()

    def pass_through(self) -> None:
        with self.lock:
            self.arrived += 1
            if self.arrived >= self.expected:
                self.opened.set()
        self.opened.wait(self.give_up_s)
        self.opened.set()


@contextmanager
def _gated_proxy(target: str, gate: _UploadGate) -> Iterator[str]:
    class Forward(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.command == "POST" and self.path.rstrip("/") == "/api/files":
                gate.pass_through()
            headers = {k: v for k, v in self.headers.items() if k.lower() not in {"host", "content-length"}}
            answer = httpx.request(self.command, target + self.path, content=body, headers=headers, timeout=120)
            self.send_response(answer.status_code)
            for name, value in answer.headers.items():
                if name.lower() not in {"content-length", "transfer-encoding", "connection", "content-encoding"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = _forward

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _train_process(url: str, key: str, home: Path) -> subprocess.Popen:
    env = dict(os.environ, SYNTH_AI_HOME=str(home), SYNTH_API_KEY=key, OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "synth_ai", "train", "--type", "sft", "--config", str(CONFIG),
                             "--dataset", str(DATASET), "--backend", url, "--no-poll", "--json"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _job_ids(backend: BackendProcess) -> set[str]:
    with backend.client() as client:
        return {job["id"] for job in client.get("/learning/jobs", params={"limit": 200}).json()["data"]}


def test_identical_train_commands_started_together_make_one_job(backend: BackendProcess, tmp_path: Path) -> None:
    home = tmp_path / "client-home"
    before = _job_ids(backend)
    with _gated_proxy(backend.url, _UploadGate(expected=4)) as url:
        processes = [_train_process(url, backend.key, home) for _ in range(4)]
        answers = [process.communicate(timeout=300) for process in processes]
        for process, (stdout, stderr) in zip(processes, answers, strict=True):
            assert process.returncode == 0, stdout + stderr
        reported = {json.loads(stdout)["job_id"] for stdout, _ in answers}
        created = _job_ids(backend) - before
        assert len(created) == 1, f"4 identical commands made {len(created)} jobs"
        assert reported == created
        again = _train_process(url, backend.key, home)
        stdout, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stdout + stderr
    assert json.loads(stdout)["job_id"] in created
    assert _job_ids(backend) - before == created, "a sequential re-run afterwards made another job"


_WRITER = """
import sys
from pathlib import Path
from synth_ai.client.idempotency import IdempotencyStore
store = IdempotencyStore(Path(sys.argv[1]))
for i in range(int(sys.argv[3])):
    fp = f"{sys.argv[2]}-{i}"
    store.key_for(fp)
    store.remember(fp, f"result-{fp}")
"""


def test_processes_writing_the_key_file_at_once_lose_no_entry(tmp_path: Path) -> None:
    """A lost entry is a later duplicate: a re-run that no longer finds the key its job was made with makes
    another job."""
    path = tmp_path / "idempotency.json"
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), f"w{n}", "15"]) for n in range(4)]
    assert [w.wait(timeout=300) for w in writers] == [0, 0, 0, 0]
    entries = json.loads(path.read_text())
    expected = {f"w{n}-{i}" for n in range(4) for i in range(15)}
    assert set(entries) == expected
    assert all(entries[fp]["result"] == f"result-{fp}" for fp in expected)
