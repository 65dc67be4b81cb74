"""What the dashboard's job page reads, over plain HTTP against a real `synth-ai backend serve`, for a long finished
RL job written into the backend's SQLite store: the newest page of its events and the pages back to the first
(while `since_seq` paging stays as 0.2.17 uses it), and its checkpoints with the iteration each was saved after."""

from __future__ import annotations

import pytest
from backend_support import chat_jsonl, serve_backend, sft_body, upload
from dashboard_support import LongRLJob, store_of, write_long_rl_job

PAGE = 100


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    yield from serve_backend(tmp_path_factory, "dash-data", warm=False)


@pytest.fixture(scope="module")
def rl_job(backend, tmp_path_factory) -> LongRLJob:
    with store_of(backend.data_dir) as store:
        return write_long_rl_job(store, "synth-ai/tiny-qwen3", tmp_path_factory.mktemp("rl-work"))


@pytest.fixture
def api(backend):
    with backend.client() as client:
        yield client


def test_newest_events_first_then_pages_back_to_the_first(api, rl_job):
    route = f"/rl/jobs/{rl_job.job_id}/events"
    newest = api.get(route, params={"order": "desc", "limit": PAGE}).json()
    seqs = [e["seq"] for e in newest["events"]]
    assert seqs == list(range(rl_job.events, rl_job.events - PAGE, -1))
    assert newest["events"][0]["type"] == "rl.job.completed"
    assert newest["has_more"] is True and newest["next_seq"] == rl_job.events
    while newest["has_more"]:
        newest = api.get(route, params={"order": "desc", "limit": PAGE, "before_seq": seqs[-1]}).json()
        assert 0 < len(newest["events"]) <= PAGE
        seqs += [e["seq"] for e in newest["events"]]
    assert seqs == list(range(rl_job.events, 0, -1))
    assert newest["events"][-1]["type"] == "rl.job.created"


def test_since_seq_paging_is_unchanged(api, rl_job):
    route = f"/rl/jobs/{rl_job.job_id}/events"
    whole = api.get(route, params={"since_seq": 0, "limit": 1000}).json()
    assert [e["seq"] for e in whole["events"]] == list(range(1, rl_job.events + 1))
    assert whole["next_seq"] == rl_job.events and whole["has_more"] is False
    first = api.get(route, params={"since_seq": 0}).json()  # 0.2.17's default page of 200
    assert [e["seq"] for e in first["events"]] == list(range(1, 201)) and first["next_seq"] == 200
    assert first["has_more"] is True
    window = api.get(route, params={"since_seq": 10, "before_seq": 20}).json()
    assert [e["seq"] for e in window["events"]] == list(range(11, 20))
    bad = api.get(route, params={"order": "newest"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"


def test_rl_checkpoints_carry_their_iteration(api, rl_job):
    doc = api.get(f"/dashboard/jobs/{rl_job.job_id}/checkpoints").json()
    assert doc["unit"] == "iteration"
    assert [c["step"] for c in doc["checkpoints"]] == rl_job.pruned + rl_job.kept
    assert [c["step"] for c in doc["checkpoints"] if c["on_disk"]] == rl_job.kept


def test_sft_checkpoints_carry_their_step(api, backend, tmp_path):
    job = api.post("/learning/jobs", json=sft_body(upload(api, chat_jsonl(tmp_path / "t.jsonl")).json()["id"]))
    job_id = job.json()["id"]
    saved = tmp_path / "checkpoints" / "step-000005"
    saved.mkdir(parents=True)
    with store_of(backend.data_dir) as store:
        store.add_event(job_id, "sft.checkpoint.saved", "Checkpoint saved at step 5.", {"step": 5, "path": str(saved)})
    doc = api.get(f"/dashboard/jobs/{job_id}/checkpoints").json()
    assert doc["unit"] == "step" and doc["checkpoints"][0]["step"] == 5 and doc["checkpoints"][0]["on_disk"] is True
