"""Idempotency keys stop duplicates of running or succeeded work only: running the same `train` again after its job
was cancelled or failed starts a new job and says why; while the job is in flight the same job answers."""

from __future__ import annotations

import json
import sqlite3

import pytest
from backend_support import BackendProcess, chat_jsonl, events, sft_body, upload
from conftest import REPO_ROOT, run_cli

CONFIG = REPO_ROOT / "examples" / "configs" / "sft_tiny_local.toml"
DATASET = REPO_ROOT / "examples" / "datasets" / "sft_math_small.jsonl"


@pytest.fixture
def backend(tmp_path):
    process = BackendProcess(tmp_path / "data", env={"SYNTH_AI_BACKEND_CANCEL_GRACE_S": "1"}).start()
    yield process
    process.stop()


def _train(backend: BackendProcess):
    return run_cli("train", "--config", str(CONFIG), "--dataset", str(DATASET), "--backend", backend.url, "--no-poll",
                   "--json")


def test_train_again_after_a_cancel_starts_a_new_job_and_says_why(backend, monkeypatch):
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    first = _train(backend)
    assert first.exit_code == 0, first.stdout + first.stderr
    first_id = json.loads(first.stdout)["job_id"]

    again = _train(backend)  # in flight: the same job, as the key is meant to do
    assert json.loads(again.stdout)["job_id"] == first_id
    assert f"Same job as an earlier run of this command (id={first_id}" in again.stderr + again.stdout

    cancelled = run_cli("--json", "jobs", "cancel", first_id, "--backend", backend.url)
    assert cancelled.json()["status"] == "cancelled"
    rerun = _train(backend)
    assert rerun.exit_code == 0, rerun.stdout + rerun.stderr
    new_id = json.loads(rerun.stdout)["job_id"]
    assert new_id != first_id
    said = rerun.stderr + rerun.stdout
    assert f"Starting a new job: the earlier run of this command made job {first_id}, which ended cancelled" in said
    assert "✓ Job created" in said
    run_cli("jobs", "cancel", new_id, "--backend", backend.url)
    with backend.client() as api:
        assert len(api.get("/learning/jobs").json()["data"]) == 2  # nothing else was created
        assert len(api.get("/files").json()["data"]) == 1  # the dataset was uploaded once


def test_backend_releases_a_key_whose_job_failed_or_was_cancelled(backend, tmp_path):
    with backend.client() as api:
        file_id = upload(api, chat_jsonl(tmp_path / "k.jsonl")).json()["id"]
        body, key = sft_body(file_id), {"Idempotency-Key": "same-key"}
        first = api.post("/learning/jobs", json=body, headers=key)
        replayed = api.post("/learning/jobs", json=body, headers=key)
        assert replayed.json()["id"] == first.json()["id"] and replayed.headers["Idempotent-Replayed"] == "true"

        for ended in ("failed", "cancelled"):
            old_id = api.post("/learning/jobs", json=body, headers=key).json()["id"]
            with sqlite3.connect(backend.data_dir / "backend" / "backend.sqlite3") as conn:
                conn.execute("UPDATE jobs SET status = ?, error = 'boom' WHERE id = ?", (ended, old_id))
            fresh = api.post("/learning/jobs", json=body, headers=key)
            assert fresh.status_code == 201
            new_id = fresh.json()["id"]
            assert new_id != old_id and fresh.headers["Idempotency-Superseded"] == f"{old_id}; status={ended}"
            note = next(e for e in events(api, new_id) if e["data"] and e["data"].get("supersedes"))
            assert note["data"] == {"supersedes": old_id, "superseded_status": ended}
            again = api.post("/learning/jobs", json=body, headers=key)  # and now the key stands for the new job
            assert again.json()["id"] == new_id and "Idempotency-Superseded" not in again.headers
        assert len(api.get("/learning/jobs").json()["data"]) == 3
