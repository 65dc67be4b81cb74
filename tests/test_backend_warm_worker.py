"""The warm worker: a job is handed to a process that imported the training stack ahead of time, and behaves
exactly like a cold-started one. A warm worker killed while it waits is replaced and the next job still runs;
cancel and a crash of a warm-started worker end the job the same way as for a cold one."""

from __future__ import annotations

import os
import signal
import time

import pytest
from backend_support import (
    BackendProcess,
    chat_jsonl,
    events,
    job_status,
    link_tiny,
    sft_body,
    upload,
    wait_for,
    warm_ready_count,
    warm_worker_pid,
)

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

pytestmark = pytest.mark.slow

FINISHED = {"succeeded", "failed", "cancelled"}


@pytest.fixture
def warm_backend(tmp_path, tiny_models):
    data = tmp_path / "data"
    link_tiny(data, tiny_models)
    # One attempt per job: a killed worker fails its job here (resuming it is tests/reliability/test_crashes.py's).
    proc = BackendProcess(data, env={"SYNTH_AI_BACKEND_WARM_WORKER": "1", "SYNTH_AI_BACKEND_MAX_ATTEMPTS": "1",
                                     "SYNTH_AI_BACKEND_CANCEL_GRACE_S": "20"}).start()
    yield proc
    proc.stop()
    # the backend takes its waiting warm worker down with it
    wait_for(lambda: warm_worker_pid(data) is None, timeout=30, what="the warm worker to exit with the backend")


def _ready_warm_pid(backend: BackendProcess, count: int = 1) -> int:
    wait_for(lambda: warm_ready_count(backend.data_dir) >= count, timeout=180, interval=0.2,
             what=f"warm worker number {count} to be ready")
    pid = warm_worker_pid(backend.data_dir)
    assert pid is not None
    return pid


def _start(api, file_id: str, **hyper) -> str:
    created = api.post("/learning/jobs", json=sft_body(file_id, **hyper))
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    assert api.post(f"/learning/jobs/{job_id}/start").status_code == 200
    return job_id


def _worker_pid(api, job_id: str) -> int:
    running = wait_for(lambda: next((e for e in events(api, job_id) if e["type"] == "sft.job.running"), None),
                       timeout=60, what="the worker to claim the job")
    return running["data"]["pid"]


def _stays_without_a_warm_worker(backend: BackendProcess, seconds: float) -> None:
    """Several scheduler ticks (0.5 s each) pass without a warm worker being started."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert warm_worker_pid(backend.data_dir) is None
        assert not (backend.data_dir / "backend" / "warm_worker.log").exists()
        time.sleep(0.2)


def test_a_job_runs_in_the_warm_worker_and_a_new_one_takes_its_place(warm_backend, tmp_path):
    # a backend with no file or job yet keeps no warm worker; the first upload starts one
    _stays_without_a_warm_worker(warm_backend, 3)
    with warm_backend.client() as api:
        file_id = upload(api, chat_jsonl(tmp_path / "w.jsonl")).json()["id"]
        warm_pid = _ready_warm_pid(warm_backend)
        job_id = _start(api, file_id, steps=4, logging_steps=1)
        assert _worker_pid(api, job_id) == warm_pid  # the waiting process ran it: no new interpreter
        wait_for(lambda: job_status(api, job_id) in FINISHED, timeout=120, what="the job to finish")
        final = api.get(f"/learning/jobs/{job_id}").json()
        assert final["status"] == "succeeded", (final, events(api, job_id)[-3:], warm_backend.log())
        assert final["fine_tuned_model"] == f"ft:synth-ai/tiny-qwen3:{job_id}"
        types = [e["type"] for e in events(api, job_id)]
        assert types[:3] == ["sft.job.created", "sft.job.queued", "sft.job.running"]
        assert "sft.progress" in types and types[-1] == "sft.job.completed"
        steps = {p["step"] for p in api.get(f"/learning/jobs/{job_id}/metrics",
                                            params={"name": "train.loss"}).json()["points"]}
        assert steps == {0, 1, 2, 3}
        # its output went to the job's own log, and the process is gone (one process per job)
        log = (warm_backend.data_dir / "backend" / "jobs" / job_id / "worker.log").read_text()
        assert "=== attempt 1 ===" in log
        wait_for(lambda: not os.path.exists(f"/proc/{warm_pid}") or _is_zombie(warm_pid), timeout=30,
                 what="the worker to exit")
    replacement = _ready_warm_pid(warm_backend, count=2)
    assert replacement != warm_pid


def test_a_killed_warm_worker_is_replaced_and_the_job_still_runs(warm_backend, tmp_path):
    with warm_backend.client() as api:
        file_id = upload(api, chat_jsonl(tmp_path / "k.jsonl")).json()["id"]
        first = _ready_warm_pid(warm_backend)
        os.kill(first, signal.SIGKILL)
        second = _ready_warm_pid(warm_backend, count=2)
        assert second != first
        job_id = _start(api, file_id, steps=3)
        assert _worker_pid(api, job_id) == second
        wait_for(lambda: job_status(api, job_id) in FINISHED, timeout=120, what="the job to finish")
        assert job_status(api, job_id) == "succeeded", events(api, job_id)[-3:]


def test_cancel_and_crash_of_a_warm_started_worker(warm_backend, tmp_path):
    with warm_backend.client() as api:
        file_id = upload(api, chat_jsonl(tmp_path / "c.jsonl")).json()["id"]
        # cancel: SIGTERM to the warm-started worker, which records `cancelled` and exits 0
        warm_pid = _ready_warm_pid(warm_backend)
        job_id = _start(api, file_id, steps=100_000, logging_steps=1)
        assert _worker_pid(api, job_id) == warm_pid
        wait_for(lambda: any(e["type"] == "sft.progress" for e in events(api, job_id)), timeout=90,
                 what="training progress")
        assert api.post(f"/learning/jobs/{job_id}/cancel").json()["status"] == "cancelled"
        types = [e["type"] for e in events(api, job_id)]
        assert "sft.job.cancel_requested" in types and types[-1] == "sft.job.cancelled"
        assert "sft.job.completed" not in types

        # crash: the next warm-started worker is killed mid-job; only that job fails, with the reason
        crash_pid = _ready_warm_pid(warm_backend, count=2)
        crashed = _start(api, file_id, steps=100_000, logging_steps=1)
        assert _worker_pid(api, crashed) == crash_pid
        wait_for(lambda: any(e["type"] == "sft.progress" for e in events(api, crashed)), timeout=90,
                 what="training progress")
        os.kill(crash_pid, signal.SIGKILL)
        wait_for(lambda: job_status(api, crashed) in FINISHED, timeout=30, what="the crash to be noticed")
        final = api.get(f"/learning/jobs/{crashed}").json()
        assert final["status"] == "failed"
        assert "killed by signal 9 (SIGKILL)" in final["error"] and "its only attempt" in final["error"]
        # the backend goes on: a third job runs in a fresh warm worker and succeeds
        third_pid = _ready_warm_pid(warm_backend, count=3)
        third = _start(api, file_id, steps=2)
        assert _worker_pid(api, third) == third_pid
        wait_for(lambda: job_status(api, third) in FINISHED, timeout=120, what="the third job to finish")
        assert job_status(api, third) == "succeeded"


def test_without_an_importable_training_stack_jobs_start_cold(tmp_path, tiny_models):
    """A warm worker that cannot import torch tells the backend to stop keeping one; jobs then start cold and
    fail with the usual reason (here a stand-in `torch` module that is not installed properly)."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "torch.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    data = tmp_path / "data"
    link_tiny(data, tiny_models)
    pythonpath = os.pathsep.join(p for p in (str(fake), os.environ.get("PYTHONPATH", "")) if p)
    backend = BackendProcess(data, env={"SYNTH_AI_BACKEND_WARM_WORKER": "1", "PYTHONPATH": pythonpath}).start()
    try:
        warm_log = data / "backend" / "warm_worker.log"
        with backend.client() as api:
            file_id = upload(api, chat_jsonl(tmp_path / "n.jsonl")).json()["id"]
            wait_for(lambda: warm_log.exists() and "cannot be imported" in warm_log.read_text(), timeout=60,
                     what="the warm worker to report the broken stack")
            job_id = _start(api, file_id, steps=2)
            wait_for(lambda: job_status(api, job_id) in FINISHED, timeout=60, what="the job to end")
            final = api.get(f"/learning/jobs/{job_id}").json()
            assert final["status"] == "failed"
            assert "add the training extra" in final["error"], final["error"]
        assert warm_log.read_text().count("cannot be imported") == 1  # not retried
        assert warm_worker_pid(data) is None
    finally:
        backend.stop()


def test_restart_recognises_an_orphaned_warm_started_worker(tmp_path):
    """A warm-started worker has no job id on its command line; settling after a restart still recognises it (by
    the job folder it works in) and never a process of another job or program."""
    import subprocess
    import sys

    from synth_ai.backend.jobs.process_contract import is_worker_of

    folder = tmp_path / "jobs" / "job_abc"
    folder.mkdir(parents=True)
    fake = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "synth_ai.backend.jobs.worker",
                             "--warm"], cwd=folder)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=folder)
    try:
        wait_for(lambda: os.path.exists(f"/proc/{fake.pid}/cmdline")
                 and b"--warm" in open(f"/proc/{fake.pid}/cmdline", "rb").read(), timeout=10, what="the process")
        assert is_worker_of(fake.pid, "job_abc")
        assert not is_worker_of(fake.pid, "job_other")
        assert not is_worker_of(other.pid, "job_abc")  # right folder, but not a worker
    finally:
        for proc in (fake, other):
            proc.kill()
            proc.wait()
    assert not is_worker_of(fake.pid, "job_abc")  # gone


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
