"""RL jobs whose rollouts vLLM samples, end to end on this machine: a real backend (subprocess, SQLite, its job
worker process), the bundled color-quiz task app, vLLM's CPU build on the tiny head_dim-64 Qwen3, over HTTP.

GSPO succeeds and its reward rises; a worker killed mid-job (its in-process vLLM engine with it) resumes from the
checkpoint in a new worker, which samples with vLLM again, and the job then cancels cleanly; and what vLLM could not
run here is refused when the job is created, with vLLM's reason.

The backend runs without OMP_NUM_THREADS (every other test backend gets OMP_NUM_THREADS=1), as a user's does: vLLM's
CPU attention then failed every attempt on a machine of more than one core until the engine pinned its threads
(issue 37, "thread_num (2 vs. 1)")."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from backend_support import link_tiny, serve_backend, wait_for
from rl_support import config, quiz_app
from taskapp_support import running_app
from vllm_support import TINY_HD64, hd64_model, require_vllm

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

ENV_KEY = "sk_env_vllm_jobs_0123456789"
TERMINAL = {"succeeded", "failed", "cancelled"}
VLLM_TABLE = {"tensor_parallel_size": 1, "max_model_len": 256, "kv_cache_memory_bytes": 64 * 1024 * 1024}


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    require_vllm()
    built = [hd64_model(tmp_path_factory)]
    yield from serve_backend(tmp_path_factory, "vllm-jobs", prepare=lambda data: link_tiny(data, built),
                             env={"ENVIRONMENT_API_KEY": ENV_KEY, "OMP_NUM_THREADS": None})


@pytest.fixture(scope="module")
def app(backend):
    with running_app(quiz_app()) as url:
        yield url


@pytest.fixture(autouse=True)
def env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)  # the key the task app accepts (read per request)


def vllm_body(task_url: str, *, model: str = TINY_HD64, vllm: dict[str, Any] | None = None,
              topology: dict[str, Any] | None = None, **training: Any) -> dict[str, Any]:
    tables: dict[str, dict[str, Any]] = {"vllm": dict(VLLM_TABLE if vllm is None else vllm),
                                         "topology": {"tensor_parallel": 1, **(topology or {})}}
    doc = config(tables=tables, **training)
    doc["model"]["base"] = model
    return {"job_type": "rl", "data": {"endpoint_base_url": task_url, "config": doc, "base_model": model}}


def create(api: Any, body: dict[str, Any]) -> str:
    answer = api.post("/rl/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def events(api: Any, job_id: str) -> list[dict[str, Any]]:
    return api.get(f"/rl/jobs/{job_id}/events", params={"since_seq": 0, "limit": 1000}).json()["events"]


def status(api: Any, job_id: str) -> str:
    return api.get(f"/rl/jobs/{job_id}").json()["status"]


def engines(log: list[dict[str, Any]]) -> list[str]:
    return [e["data"]["engine"] for e in log if e["type"] == "rl.rollout_engine"]


def test_gspo_samples_with_vllm_and_the_reward_rises(backend, app):
    with open(f"/proc/{backend.proc.pid}/environ", "rb") as environ:  # as a user's backend runs: no thread count
        assert not any(v.startswith(b"OMP_NUM_THREADS=") for v in environ.read().split(b"\0"))
    with backend.client() as api:
        job_id = create(api, vllm_body(app, batch_size=4, group_size=8, iterations_per_epoch=6))
        wait_for(lambda: status(api, job_id) in TERMINAL, timeout=600, interval=0.5, what="the vLLM job")
        job, log = api.get(f"/rl/jobs/{job_id}").json(), events(api, job_id)
        assert job["status"] == "succeeded", (job, log[-5:])
        assert engines(log) == ["vllm"]
        points = api.get(f"/rl/jobs/{job_id}/metrics", params={"name": "reward.mean", "limit": 100}).json()["points"]
        rewards = [p["value"] for p in sorted(points, key=lambda p: p["step"])]
        assert len(rewards) == 6
        assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.1, f"reward did not rise: {rewards}"
        assert job["fine_tuned_model"] == f"rl:{TINY_HD64}:{job_id}"


def test_asynchronous_gspo_publishes_to_the_vllm_engine(backend, app):
    """`max_staleness` > 0 with the vLLM engine: its `sync_weights` is what `publish` calls after every step."""
    with backend.client() as api:
        job_id = create(api, vllm_body(app, iterations_per_epoch=3, max_staleness=1))
        wait_for(lambda: status(api, job_id) in TERMINAL, timeout=600, interval=0.5, what="the asynchronous job")
        job, log = api.get(f"/rl/jobs/{job_id}").json(), events(api, job_id)
        assert job["status"] == "succeeded", (job, log[-5:])
        assert engines(log) == ["vllm"]
        points = api.get(f"/rl/jobs/{job_id}/metrics", params={"name": "staleness.max", "limit": 100}).json()
        staleness = [p["value"] for p in sorted(points["points"], key=lambda p: p["step"])]
        assert len(staleness) == 3 and max(staleness) <= 1


def test_a_killed_worker_resumes_with_vllm_from_the_checkpoint_then_cancels(backend, app):
    with backend.client() as api:
        job_id = create(api, vllm_body(app, iterations_per_epoch=200, checkpoint_interval=2))
        wait_for(lambda: any(e["type"] == "rl.checkpoint.saved" for e in events(api, job_id)), timeout=300,
                 interval=0.5, what="a checkpoint")
        started = next(e for e in events(api, job_id) if e["data"].get("pid") and e["data"].get("attempt") == 1)
        os.kill(started["data"]["pid"], signal.SIGKILL)  # the OOM killer's way: the engine dies with its worker

        def stepped_after_resume() -> bool:
            log = events(api, job_id)
            resumed = [e["seq"] for e in log if e["type"] == "rl.train.resumed"]
            return bool(resumed) and any(e["type"] == "rl.train.step" and e["seq"] > resumed[0] for e in log)

        wait_for(stepped_after_resume, timeout=300, interval=0.5, what="a step after the resume")
        assert api.post(f"/rl/jobs/{job_id}/cancel").status_code == 200
        wait_for(lambda: status(api, job_id) in TERMINAL, timeout=120, interval=0.5, what="the cancel")
        job, log = api.get(f"/rl/jobs/{job_id}").json(), events(api, job_id)
        assert job["status"] == "cancelled" and job["attempts"] == 2, (job, log[-5:])
        requeued = next(e for e in log if e["type"] == "rl.job.requeued")
        assert "killed by signal 9" in requeued["message"]
        resumed = next(e for e in log if e["type"] == "rl.train.resumed")
        assert resumed["data"]["iteration"] >= 2
        assert engines(log) == ["vllm", "vllm"]  # the new worker samples with a new vLLM engine
        stopped = next(e for e in log if e["type"] == "rl.train.stopped")
        assert "because the job was cancelled" in stopped["message"]


@pytest.mark.parametrize(("model", "vllm", "topology", "code", "words"), [
    # the default tiny model's head size: vLLM's reason, and what to use instead
    ("synth-ai/tiny-qwen3", None, None, "vllm_cannot_run", ["head_dim=16", "synth-ai/tiny-qwen3-hd64"]),
    # more tensor-parallel ranks than this CPU machine runs
    (TINY_HD64, {**VLLM_TABLE, "tensor_parallel_size": 2}, {"tensor_parallel": 2}, "vllm_cannot_run",
     ["tensor_parallel_size = 2", "no GPU"]),
])
def test_what_vllm_cannot_run_here_is_refused_at_create_time(backend, app, model, vllm, topology, code, words):
    with backend.client() as api:
        before = api.get("/rl/jobs").json()
        answer = api.post("/rl/jobs", json=vllm_body(app, model=model, vllm=vllm, topology=topology))
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == code
        for word in words:
            assert word in error["message"] + (error.get("hint") or ""), error
        assert api.get("/rl/jobs").json() == before  # nothing was created
