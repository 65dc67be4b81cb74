"""`synth-ai jobs get|events|metrics|follow|cancel` take a job id of any kind without `--kind`, and the backend's
`/learning/jobs/{id}` routes serve RL jobs as well (the hosted API's status fallback for RL jobs).

A real `synth-ai backend serve`; the jobs are written into its SQLite by the test, the way a worker writes them. The
client's requests go through a recording wrapper around the real HTTP transport, which for the hosted-API case also
answers 404 where a hosted `/learning/jobs` does not serve a job.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from backend_support import BackendProcess, job_store, serve_backend
from conftest import run_cli
from synth_ai.client.follow_stream import parse_frames

MODEL = "synth-ai/tiny-qwen3"
JOB_SUFFIXES = ("", "/status", "/config", "/events", "/metrics", "/timeline")


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackendProcess]:
    yield from serve_backend(tmp_path_factory, "any-kind", env={"SYNTH_AI_BACKEND_WARM_WORKER": "0"})


@pytest.fixture(scope="module")
def store(backend: BackendProcess):
    yield from job_store(backend)


@pytest.fixture(autouse=True)
def key_env(backend: BackendProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)


def _job(store, kind: str, prefix: str, status: str = "created") -> str:
    """A job with one event and one metric point, left `created` (the scheduler starts only queued jobs) or moved
    to `status`."""
    with store.db.tx() as conn:
        job_id = store.insert(conn, kind=kind, training_type="rl_online" if kind == "rl" else "sft_offline",
                              model=MODEL, payload={"kind_under_test": kind}, files=[], prefix=prefix)
    store.add_metric(job_id, "reward.mean" if kind == "rl" else "train.loss", 0, 0.25)
    if status != "created":
        store.transition(job_id, "running")
    if status not in {"created", "running"}:
        store.transition(job_id, status, fine_tuned_model=f"rl:{MODEL}:{job_id}" if status == "succeeded" else None)
    return job_id


class Routes(httpx.BaseTransport):
    """The real server, with each request's method and path recorded. Paths starting with one of `missing` answer
    404, as a hosted API's `/learning/jobs/{id}/...` does for a job it serves under `/rl/jobs` only."""

    def __init__(self, missing: tuple[str, ...] = ()) -> None:
        self.real = httpx.HTTPTransport()
        self.missing = missing
        self.seen: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(f"{request.method} {request.url.path}")
        if request.url.path.startswith(self.missing):
            return httpx.Response(404, json={"detail": "Not Found"})
        return self.real.handle_request(request)


def _routes(monkeypatch: pytest.MonkeyPatch, missing: tuple[str, ...] = ()) -> Routes:
    import synth_ai.client.transport as transport

    routes = Routes(missing)
    monkeypatch.setattr(transport, "HTTP_TRANSPORT_OVERRIDE", routes)
    return routes


def _cli(backend: BackendProcess, *args: str) -> tuple[int, Any]:
    result = run_cli("--json", "jobs", *args, "--backend", backend.url)
    assert result.stdout.strip(), result.stderr
    return result.exit_code, json.loads(result.stdout)


def test_learning_routes_serve_rl_jobs_with_the_rl_routes_answers(backend: BackendProcess, store) -> None:
    job_id = _job(store, "rl", "rljob", status="running")
    store.add_event(job_id, "rl.train.step", "iteration 1/3", {"iteration": 1})
    with backend.client() as client:
        for suffix in JOB_SUFFIXES:
            via_learning = client.get(f"/learning/jobs/{job_id}{suffix}")
            assert via_learning.status_code == 200, (suffix, via_learning.text)
            assert via_learning.json() == client.get(f"/rl/jobs/{job_id}{suffix}").json(), suffix
        assert client.get(f"/learning/jobs/{job_id}").json()["job_type"] == "rl"
        store.transition(job_id, "succeeded", fine_tuned_model=f"rl:{MODEL}:{job_id}")
        frames = list(parse_frames(client.get(f"/learning/jobs/{job_id}/events/stream").text.splitlines()))
        assert [f.data["type"] for f in frames if f.kind == "event"][-1] == "rl.train.step"
        assert frames[-1].kind == "end" and frames[-1].data["status"] == "succeeded"

        queued = _job(store, "rl", "rljob")
        cancelled = client.post(f"/learning/jobs/{queued}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        assert client.get(f"/rl/jobs/{queued}").json()["status"] == "cancelled"

        sft = _job(store, "sft", "job")  # the RL routes still serve RL jobs only
        missing = client.get(f"/rl/jobs/{sft}")
        assert missing.status_code == 404 and "GET /api/rl/jobs" in missing.json()["error"]["hint"]


def test_an_rljob_id_needs_no_kind(backend: BackendProcess, store, monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = _job(store, "rl", "rljob")
    store.add_event(job_id, "rl.train.step", "iteration 1/3", {"iteration": 1})
    routes = _routes(monkeypatch)
    assert _cli(backend, "get", job_id)[1]["job_type"] == "rl"
    assert "rl.train.step" in [e["type"] for e in _cli(backend, "events", job_id)[1]["events"]]
    assert [(p["name"], p["value"]) for p in _cli(backend, "metrics", job_id)[1]["points"]] == [("reward.mean", 0.25)]
    code, doc = _cli(backend, "cancel", job_id)
    assert code == 0 and doc["status"] == "cancelled"
    finished = _job(store, "rl", "rljob", status="succeeded")
    code, doc = _cli(backend, "follow", finished)
    assert code == 0 and doc["status"] == "succeeded" and doc["fine_tuned_model"] == f"rl:{MODEL}:{finished}"
    # each went to the RL routes, as a hosted backend needs (its /learning/jobs/{id}/cancel does not know RL jobs)
    assert routes.seen and all(seen.split()[1].startswith("/api/rl/jobs/rljob_") for seen in routes.seen), routes.seen
    assert f"POST /api/rl/jobs/{job_id}/cancel" in routes.seen
    code, doc = _cli(backend, "follow", job_id)
    assert code == 6 and f"synth-ai jobs events {job_id} --backend" in doc["error"]["hint"]  # no --kind to add

    sft = _job(store, "sft", "job")
    routes.seen.clear()
    assert _cli(backend, "get", sft)[1]["job_type"] == "sft"
    assert routes.seen == [f"GET /api/learning/jobs/{sft}"]


def test_kind_still_overrides_what_the_id_says(backend: BackendProcess, store, monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = _job(store, "rl", "rljob")
    routes = _routes(monkeypatch)
    code, doc = _cli(backend, "metrics", job_id, "--kind", "sft")
    assert code == 0 and doc["points"][0]["name"] == "reward.mean"
    assert routes.seen == [f"GET /api/learning/jobs/{job_id}/metrics"]
    code, doc = _cli(backend, "get", _job(store, "sft", "job"), "--kind", "rl")
    assert routes.seen[1].startswith("GET /api/rl/jobs/job_")


def test_an_id_of_another_shape_tries_learning_then_rl(backend: BackendProcess, store,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A hosted backend's ids say nothing of their kind; its `/learning/jobs/{id}/...` may not know an RL job."""
    job_id = _job(store, "rl", "hosted")
    routes = _routes(monkeypatch, missing=(f"/api/learning/jobs/{job_id}",))
    assert _cli(backend, "get", job_id)[1]["id"] == job_id
    assert routes.seen[:2] == [f"GET /api/learning/jobs/{job_id}", f"GET /api/rl/jobs/{job_id}"]
    assert _cli(backend, "events", job_id)[1]["events"][0]["type"] == "rl.job.created"
    assert _cli(backend, "metrics", job_id)[1]["points"][0]["value"] == 0.25
    code, doc = _cli(backend, "cancel", job_id)
    assert code == 0 and doc["status"] == "cancelled"
    assert routes.seen[-2:] == [f"POST /api/learning/jobs/{job_id}/cancel", f"POST /api/rl/jobs/{job_id}/cancel"]
    routes.seen.clear()
    code, doc = _cli(backend, "follow", job_id)  # found under /rl/jobs: followed there
    assert code == 6 and doc["error"]["details"]["status"] == "cancelled"
    assert routes.seen[:3] == [f"GET /api/learning/jobs/{job_id}", f"GET /api/rl/jobs/{job_id}",
                               f"GET /api/rl/jobs/{job_id}/events/stream"], routes.seen
    assert f"synth-ai jobs events {job_id} --kind rl --backend" in doc["error"]["hint"]  # the id does not say rl

    # this backend's /learning/jobs serves every kind: one call
    other = _job(store, "rl", "hosted")
    routes = _routes(monkeypatch)
    assert _cli(backend, "get", other)[1]["job_type"] == "rl" and routes.seen == [f"GET /api/learning/jobs/{other}"]
    code, doc = _cli(backend, "get", "hosted_missing")
    assert code == 8 and "not found" in doc["error"]["message"]


def test_the_backend_makes_ids_with_the_prefixes_the_client_reads() -> None:
    """One table of prefixes (`synth_ai/models/job_ids.py`): the kinds registry takes its `id_prefix` from it, and the
    client tells an id's kind by it without importing the backend."""
    from synth_ai.backend.jobs.kinds import KINDS
    from synth_ai.models.job_ids import ID_PREFIXES, kind_of_job_id

    assert {name: kind.id_prefix for name, kind in KINDS.items()} == ID_PREFIXES
    for name, kind in KINDS.items():
        assert kind_of_job_id(f"{kind.id_prefix}_0123abcd") == name
    assert kind_of_job_id("ftjob-0123abcd") is None and kind_of_job_id("jobless") is None
