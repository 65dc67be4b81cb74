"""Restart settlement without training: jobs a dead backend left `running` are failed with a reason when they
cannot be resumed (resuming disabled, attempts used up), and an upload in flight when the backend died leaves no
temp file behind."""

from __future__ import annotations

import signal
import sqlite3

from backend_support import BackendProcess, chat_jsonl, events, sft_body, upload


def _leave_running(db_path, job_id: str, attempts: int) -> None:
    """What a backend killed mid-job leaves behind: the job `running`, its worker pid long gone."""
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE jobs SET status = 'running', attempts = ?, worker_pid = 999999999, "
                     "started_at = created_at WHERE id = ?", (attempts, job_id))


def test_restart_fails_jobs_it_cannot_resume(tmp_path):
    data = tmp_path / "data"
    first = BackendProcess(data).start()
    with first.client() as api:
        file_id = upload(api, chat_jsonl(tmp_path / "r.jsonl")).json()["id"]
        a = api.post("/learning/jobs", json=sft_body(file_id)).json()["id"]
        b = api.post("/learning/jobs", json=sft_body(file_id)).json()["id"]
    first.kill(signal.SIGKILL)
    (data / "backend" / "tmp" / "upload-half.part").write_bytes(b"half an upload")
    db = data / "backend" / "backend.sqlite3"
    _leave_running(db, a, attempts=1)

    second = BackendProcess(data, env={"SYNTH_AI_BACKEND_RESUME": "0"}).start()
    try:
        with second.client() as api:
            job_a = api.get(f"/learning/jobs/{a}").json()
            assert job_a["status"] == "failed"
            assert "backend restarted while it was running" in job_a["error"]
            assert "SYNTH_AI_BACKEND_RESUME=0" in job_a["error"]
            last = events(api, a)[-1]
            assert last["type"] == "sft.job.failed" and last["data"]["reason"] == job_a["error"]
            assert api.get(f"/learning/jobs/{a}/timeline").json()["events"][-1]["phase"] == "failed"
            assert api.get(f"/files/{file_id}").json()["status"] == "ready"
    finally:
        second.stop()
    assert not (data / "backend" / "tmp" / "upload-half.part").exists()
    assert db_status(second, b) == "created"  # never started: left alone
    _leave_running(db, b, attempts=3)

    third = BackendProcess(data).start()  # resuming enabled, but b has used its 3 attempts
    try:
        with third.client() as api:
            job_b = api.get(f"/learning/jobs/{b}").json()
            assert job_b["status"] == "failed" and "all 3 attempts" in job_b["error"]
    finally:
        third.stop()


def db_status(backend: BackendProcess, job_id: str) -> str:
    with sqlite3.connect(backend.data_dir / "backend" / "backend.sqlite3") as conn:
        return conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]
