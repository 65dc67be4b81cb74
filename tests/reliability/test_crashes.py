"""Crashes, injected with `kill -9` at seeded random points, against real backends, workers and task apps:

- a worker killed mid-job (what the OOM killer or a preempted GPU host does) resumes the job from its last
  checkpoint, SFT and RL; a job whose every attempt is killed fails with each attempt's reason;
- the backend killed mid-upload leaves no half-visible file, and every stored blob keeps its sha256;
- (soak) many random kill points of the backend or the worker: every job settles, resumed or failed with a reason.

The seed is `SYNTH_CRASH_SEED` (default below); a failure prints it, so the same kill points can be replayed.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from backend_support import (
    TINY_TEXT,
    BackendProcess,
    chat_jsonl,
    events,
    job_status,
    link_tiny,
    sft_body,
    upload,
    wait_for,
)

pytestmark = pytest.mark.slow
pytest.importorskip("torch")
pytest.importorskip("transformers")

SEED = int(os.environ.get("SYNTH_CRASH_SEED", "14"))
ENV_KEY = "sk_env_crashes_0123456789abcdef"
TERMINAL = {"succeeded", "failed", "cancelled"}


@pytest.fixture
def rng(request) -> random.Random:
    print(f"crash seed: SYNTH_CRASH_SEED={SEED} ({request.node.name})")
    return random.Random(f"{SEED}:{request.node.name}")


def _worker_pid(data: Path, job_id: str) -> int | None:
    with sqlite3.connect(data / "backend" / "backend.sqlite3") as conn:
        row = conn.execute("SELECT worker_pid, status FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return row[0] if row and row[1] == "running" and row[0] else None


def _kill_worker(data: Path, job_id: str) -> int:
    pid = wait_for(lambda: _worker_pid(data, job_id), timeout=120, what="a running worker")
    os.kill(pid, signal.SIGKILL)
    return pid


def _events(api: httpx.Client, prefix: str, job_id: str) -> list[dict[str, Any]]:
    return api.get(f"{prefix}/{job_id}/events", params={"since_seq": 0, "limit": 1000}).json()["events"]


def _status(api: httpx.Client, prefix: str, job_id: str) -> str:
    return api.get(f"{prefix}/{job_id}").json()["status"]


def _loss_steps(api: httpx.Client, prefix: str, job_id: str, name: str) -> set[int]:
    points = api.get(f"{prefix}/{job_id}/metrics", params={"name": name, "limit": 5000}).json()["points"]
    return {p["step"] for p in points}


def _blobs_keep_their_sha256(data: Path) -> int:
    blobs = [p for p in (data / "backend" / "blobs").rglob("*") if p.is_file()]
    for blob in blobs:
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name, blob
    return len(blobs)


def test_sft_worker_killed_resumes_from_its_checkpoint(tmp_path, tiny_text_models, rng):
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    backend = BackendProcess(data).start()
    try:
        with backend.client() as api:
            source = chat_jsonl(tmp_path / "w.jsonl", n=16)
            file_id = upload(api, source).json()["id"]
            steps, save = 60, 10
            job_id = api.post("/learning/jobs", json=sft_body(file_id, steps=steps, save_steps=save,
                                                              logging_steps=10)).json()["id"]
            api.post(f"/learning/jobs/{job_id}/start")
            kill_after = rng.randint(save + 1, steps - 20)  # past the first checkpoint, before the end
            wait_for(lambda: max(_loss_steps(api, "/learning/jobs", job_id, "train.loss"), default=-1) >= kill_after,
                     timeout=180, interval=0.05, what=f"step {kill_after}")
            _kill_worker(data, job_id)

            wait_for(lambda: job_status(api, job_id) in TERMINAL, timeout=240, interval=0.5, what="the job to end")
            job = api.get(f"/learning/jobs/{job_id}").json()
            log = events(api, job_id)
            assert job["status"] == "succeeded", (job, log[-5:], backend.log())
            assert job["attempts"] == 2
            requeued = next(e for e in log if e["type"] == "sft.job.requeued")
            assert "killed by signal 9 (SIGKILL)" in requeued["message"]
            assert "attempt 2 of 3" in requeued["message"]
            resumed = next(e for e in log if e["type"] == "sft.training.resumed")
            assert resumed["data"]["step"] >= save
            assert _loss_steps(api, "/learning/jobs", job_id, "train.loss") == set(range(steps))  # no hole
            assert "sft.job.failed" not in {e["type"] for e in log}
            assert api.get(f"/files/{file_id}").json()["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
        assert _blobs_keep_their_sha256(data) >= 1
    finally:
        backend.stop()


def test_a_job_whose_every_attempt_is_killed_fails_with_each_reason(tmp_path, tiny_text_models):
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    backend = BackendProcess(data, env={"SYNTH_AI_BACKEND_MAX_ATTEMPTS": "2"}).start()
    try:
        with backend.client() as api:
            file_id = upload(api, chat_jsonl(tmp_path / "x.jsonl")).json()["id"]
            job_id = api.post("/learning/jobs", json=sft_body(file_id, steps=100_000)).json()["id"]
            api.post(f"/learning/jobs/{job_id}/start")
            first = _kill_worker(data, job_id)
            wait_for(lambda: (_worker_pid(data, job_id) or first) != first, timeout=120, what="attempt 2")
            _kill_worker(data, job_id)
            wait_for(lambda: job_status(api, job_id) in TERMINAL, timeout=60, what="the job to fail")
            job = api.get(f"/learning/jobs/{job_id}").json()
            log = events(api, job_id)
        assert job["status"] == "failed" and job["attempts"] == 2
        killed = "the worker process was killed by signal 9 (SIGKILL)"
        assert job["error"] == f"{killed} (all 2 attempts ended this way)"  # the same reason is said once
        failed = log[-1]
        assert failed["type"] == "sft.job.failed" and failed["data"]["attempt_reasons"] == [killed, killed]
        assert [e["type"] for e in log].count("sft.job.requeued") == 1
    finally:
        backend.stop()


def test_rl_worker_killed_resumes_from_its_checkpoint(tmp_path, tiny_text_models, rng, monkeypatch):
    from rl_support import quiz_app, rl_body
    from taskapp_support import running_app

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    iterations = 3
    backend = BackendProcess(data, env={"ENVIRONMENT_API_KEY": ENV_KEY}).start()
    try:
        with running_app(quiz_app(delay=0.1)) as app, backend.client() as api:
            job_id = api.post("/rl/jobs", json=rl_body(app, iterations_per_epoch=iterations,
                                                       checkpoint_interval=1)).json()["id"]
            kill_at = rng.randint(1, iterations - 1)  # after this many checkpoints
            wait_for(lambda: sum(e["type"] == "rl.checkpoint.saved" for e in _events(api, "/rl/jobs", job_id))
                     >= kill_at, timeout=240, interval=0.1, what=f"checkpoint {kill_at}")
            _kill_worker(data, job_id)
            wait_for(lambda: _status(api, "/rl/jobs", job_id) in TERMINAL, timeout=300, interval=0.5,
                     what="the resumed job")
            job = api.get(f"/rl/jobs/{job_id}").json()
            log = _events(api, "/rl/jobs", job_id)
            assert job["status"] == "succeeded", (job, log[-5:], backend.log())
            assert job["attempts"] == 2
            requeued = next(e for e in log if e["type"] == "rl.job.requeued")
            assert "killed by signal 9 (SIGKILL)" in requeued["message"]
            resumed = next(e for e in log if e["type"] == "rl.train.resumed")
            assert resumed["data"]["iteration"] >= kill_at
            assert _loss_steps(api, "/rl/jobs", job_id, "reward.mean") == set(range(iterations))
            assert job["fine_tuned_model"] == f"rl:{TINY_TEXT}:{job_id}"
    finally:
        backend.stop()


def test_backend_killed_mid_upload_leaves_no_half_file(tmp_path, rng):
    """The upload streams slowly; the backend is killed after a random number of bytes. After the restart the
    file is not listed (nor its temp file left), every blob keeps its sha256, and the same upload with the same
    Idempotency-Key then succeeds once. Then the uploading client is killed mid-upload: nothing half-made stays."""
    data = tmp_path / "data"
    source = chat_jsonl(tmp_path / "big.jsonl", n=40_000)  # about 3 MB
    payload = source.read_bytes()
    digest = hashlib.sha256(payload).hexdigest()
    first = BackendProcess(data).start()
    with first.client() as api:
        upload(api, chat_jsonl(tmp_path / "small.jsonl"))  # one complete file, which must survive
    cut = rng.randint(1_200_000, len(payload) - 1)  # past the server's first 1 MiB hand-off to its parser
    sent = threading.Event()

    def slow_body():
        head = (b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nfine-tune\r\n--b\r\n'
                b'Content-Disposition: form-data; name="file"; filename="big.jsonl"\r\n'
                b'Content-Type: application/jsonl\r\n\r\n')
        yield head + payload[:cut]
        sent.set()
        time.sleep(30)  # the backend dies meanwhile
        yield payload[cut:] + b"\r\n--b--\r\n"

    def send() -> None:
        try:
            httpx.post(f"{first.url}/api/files", content=slow_body(), timeout=60,
                       headers={"Authorization": f"Bearer {first.key}", "Idempotency-Key": "upload-1",
                                "Content-Type": "multipart/form-data; boundary=b"})
        except httpx.HTTPError:
            pass  # the connection dies with the backend

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    assert sent.wait(30)
    partial = wait_for(lambda: list((data / "backend" / "tmp").iterdir()), timeout=30, what="the upload in flight")
    first.kill(signal.SIGKILL)
    assert partial  # the kill came mid-upload: a partial file was on disk

    second = BackendProcess(data).start()
    try:
        with second.client() as api:
            listed = api.get("/files").json()["data"]
            assert [f["filename"] for f in listed] == ["small.jsonl"], listed
            assert not any((data / "backend" / "tmp").iterdir())
            assert _blobs_keep_their_sha256(data) == 1
            again = upload(api, source, headers={"Idempotency-Key": "upload-1"})
            assert again.status_code == 201 and again.json()["sha256"] == digest
            assert upload(api, source, headers={"Idempotency-Key": "upload-1"}).json()["id"] == again.json()["id"]
            assert len(api.get("/files").json()["data"]) == 2

            # the uploading client killed mid-upload: the backend drops the partial file, lists nothing new
            uploader = _slow_uploader(second, tmp_path / "other.jsonl", rng.randint(1_200_000, 3_000_000))
            try:
                wait_for(lambda: list((data / "backend" / "tmp").iterdir()), timeout=60, what="a partial upload")
            finally:
                uploader.kill()
                uploader.wait()
            wait_for(lambda: not list((data / "backend" / "tmp").iterdir()), timeout=30, what="the partial to go")
            assert len(api.get("/files").json()["data"]) == 2
        assert _blobs_keep_their_sha256(data) == 2
    finally:
        second.stop()


def _slow_uploader(backend: BackendProcess, path: Path, cut: int):
    """A separate client process that sends `cut` bytes of an upload, then waits (to be killed)."""
    import subprocess
    import sys

    chat_jsonl(path, n=40_000)
    code = (
        "import sys, time, httpx\n"
        "url, key, path, cut = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])\n"
        "data = open(path, 'rb').read()\n"
        "def body():\n"
        "    yield (b'--b\\r\\nContent-Disposition: form-data; name=\"file\"; filename=\"o.jsonl\"\\r\\n'\n"
        "           b'Content-Type: application/jsonl\\r\\n\\r\\n') + data[:cut]\n"
        "    time.sleep(600)\n"
        "    yield data[cut:] + b'\\r\\n--b--\\r\\n'\n"
        "httpx.post(url, content=body(), timeout=600, headers={'Authorization': 'Bearer ' + key,\n"
        "           'Content-Type': 'multipart/form-data; boundary=b'})\n")
    return subprocess.Popen([sys.executable, "-c", code, f"{backend.url}/api/files", backend.key, str(path), str(cut)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_eval_killed_mid_run_keeps_whole_sessions_only(tmp_path, rng):
    """`eval` killed with SIGKILL while seeds are in flight (2 at a time) after a random number of them were
    stored: every stored session is whole (its outcome and both messages), nothing is orphaned, the database
    passes SQLite's integrity check, and a second run stores the rest."""
    import asyncio
    import subprocess

    from eval_support import answering_policy, by_seed, write_config
    from taskapp_support import scripted_model, subprocess_env, synth_ai_command

    async def policy(body):
        await asyncio.sleep(0.2)  # keep seeds in flight when the kill comes
        return answering_policy()(body)

    db = tmp_path / "eval.db"
    kill_after = rng.randint(1, 6)
    with scripted_model(policy) as (model_url, _):
        config = write_config(tmp_path / "eval.toml", model_url, seeds="0-9", concurrency=2)
        command = [*synth_ai_command(), "eval", "--config", str(config), "--trace-db", str(db)]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path,
                                   env=subprocess_env(), stdin=subprocess.DEVNULL)
        try:
            wait_for(lambda: _stored(db) >= kill_after or process.poll() is not None, timeout=120, interval=0.02,
                     what=f"{kill_after} stored seeds")
            process.kill()
        finally:
            process.wait()
        assert process.returncode == -signal.SIGKILL  # killed mid-run, not finished before the kill
        stored = by_seed(db)
        assert len(stored) >= kill_after
        for session in stored.values():
            assert session["outcomes"] == [(1, 0)] and session["messages"] == ["system", "user", "assistant"]
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            for table in ("messages", "events", "outcome_rewards"):
                orphans = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE session_id NOT IN "
                                       "(SELECT session_id FROM session_traces)").fetchone()[0]
                assert orphans == 0, table
        again = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=subprocess_env(),
                               stdin=subprocess.DEVNULL, timeout=120)
        assert again.returncode == 0, again.stdout + again.stderr
    assert set(range(10)) <= set(by_seed(db))


def _stored(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM session_traces").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


@pytest.mark.soak
@pytest.mark.parametrize("round_", range(int(os.environ.get("SYNTH_CRASH_ROUNDS", "6"))))
def test_soak_random_kills_of_backend_or_worker_settle_every_job(tmp_path, tiny_text_models, round_):
    """Each round: an SFT job, one `kill -9` of the backend or of the worker at a random step; after the restart
    (backend) or the respawn (worker) the job ends succeeded, or failed with a reason; never stuck, never silent."""
    rng = random.Random(f"{SEED}:soak:{round_}")
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    backend = BackendProcess(data).start()
    target = rng.choice(["backend", "worker"])
    steps = 80
    kill_after = rng.randint(0, steps - 10)
    print(f"round {round_}: kill the {target} after step {kill_after} (SYNTH_CRASH_SEED={SEED})")
    with backend.client() as api:
        file_id = upload(api, chat_jsonl(tmp_path / "s.jsonl", n=16)).json()["id"]
        job_id = api.post("/learning/jobs", json=sft_body(file_id, steps=steps, save_steps=rng.choice([10, 20, 40]),
                                                          logging_steps=10)).json()["id"]
        api.post(f"/learning/jobs/{job_id}/start")
        wait_for(lambda: max(_loss_steps(api, "/learning/jobs", job_id, "train.loss"), default=-1) >= kill_after
                 or job_status(api, job_id) in TERMINAL, timeout=240, interval=0.05, what=f"step {kill_after}")
    if target == "worker":
        pid = _worker_pid(data, job_id)
        if pid:
            os.kill(pid, signal.SIGKILL)
    else:
        backend.kill(signal.SIGKILL)
        backend = BackendProcess(data).start()
    try:
        with backend.client() as api:
            wait_for(lambda: job_status(api, job_id) in TERMINAL, timeout=300, interval=0.5, what="the job to end")
            job = api.get(f"/learning/jobs/{job_id}").json()
            print(f"round {round_}: {job['status']} after {job['attempts']} attempt(s) {job.get('error') or ''}")
            if job["status"] == "succeeded":
                assert _loss_steps(api, "/learning/jobs", job_id, "train.loss") == set(range(steps))
            else:
                assert job["status"] == "failed" and job["error"], job
        _blobs_keep_their_sha256(data)
    finally:
        backend.stop()
