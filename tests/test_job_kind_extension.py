"""A job kind registered from outside the backend runs end to end: its module (tests/toy_job_kind.py) is named in
SYNTH_AI_JOB_KINDS, a real backend serves it, and a job of it goes through the real scheduler and a real worker
process to `succeeded`, with its events and metrics. Nothing in the backend names the kind."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend_support import TINY_TEXT, BackendProcess, job_store, serve_backend, wait_for
from synth_ai.backend.jobs import kinds

TOY_MODULE = "toy_job_kind"
TESTS_DIR = str(Path(__file__).resolve().parent)


@pytest.fixture(scope="module", autouse=True)
def _registry_restored() -> Iterator[None]:
    """Importing the toy module registers its kind in this process's registry; other test files that share the worker
    (pytest-xdist's loadfile) must see only the built-in kinds afterwards."""
    saved = dict(kinds.KINDS)
    yield
    kinds.KINDS.clear()
    kinds.KINDS.update(saved)
    sys.modules.pop(TOY_MODULE, None)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackendProcess]:
    path = os.pathsep.join(p for p in (TESTS_DIR, os.environ.get("PYTHONPATH", "")) if p)
    yield from serve_backend(tmp_path_factory, "toy-kind", env={kinds.EXTENSIONS_ENV: TOY_MODULE, "PYTHONPATH": path,
                                                               "SYNTH_AI_BACKEND_GPUS": "0"})


@pytest.fixture(scope="module")
def store(backend: BackendProcess):
    yield from job_store(backend)


def _finished(client, job_id: str) -> dict | None:
    doc = client.get(f"/learning/jobs/{job_id}").json()
    return doc if doc["status"] in {"succeeded", "failed", "cancelled"} else None


def test_a_registered_kind_runs_through_the_scheduler_and_a_worker(backend: BackendProcess, store) -> None:
    from toy_job_kind import COUNTING

    assert kinds.find_kind("counting") is COUNTING
    payload = COUNTING.check_body({"steps": 3})
    COUNTING.check_settings(COUNTING.spec_of(payload))
    with store.db.tx() as conn:  # what a create route of the kind would store
        job_id = store.insert(conn, kind=COUNTING.name, training_type=COUNTING.training_type, model=TINY_TEXT,
                              payload=payload, files=[], prefix=COUNTING.id_prefix)
    assert job_id.startswith("countjob_")
    with backend.client() as client:
        assert client.post(f"/learning/jobs/{job_id}/start").status_code == 200
        job = wait_for(lambda: _finished(client, job_id), timeout=300, what="the counting job to finish")
        assert job["status"] == "succeeded", backend.log()
        assert job["fine_tuned_model"] == f"counted:{TINY_TEXT}:{job_id}"
        types = [e["type"] for e in client.get(f"/learning/jobs/{job_id}/events").json()["events"]]
        points = client.get(f"/learning/jobs/{job_id}/metrics").json()["points"]
    assert types.count("counting.count.step") == 3
    assert types.index("counting.job.running") < types.index("counting.count.step") < types.index(
        "counting.job.completed")
    assert [(p["name"], p["step"], p["value"]) for p in points] == [("count.value", s, s + 1.0) for s in range(3)]


def test_a_registered_kinds_body_check_refuses_bad_input() -> None:
    from synth_ai.backend.http_errors import ApiError
    from toy_job_kind import COUNTING

    with pytest.raises(ApiError) as refused:
        COUNTING.check_body({"steps": 0})
    assert refused.value.status_code == 400 and "steps" in refused.value.message


def test_a_kind_under_a_taken_name_or_id_prefix_is_refused() -> None:
    rl = kinds.job_kind(kinds.RL_KIND)
    assert kinds.register_kind(rl) is rl  # the same kind again: nothing changes
    for clash in ({"name": rl.name, "id_prefix": "other"}, {"name": "other", "id_prefix": rl.id_prefix}):
        with pytest.raises(ValueError, match="clashes"):
            kinds.register_kind(kinds.JobKind(training_type="x", body_check="m:f", settings="m:f", runner="m:f",
                                              package="m", **clash))
    assert kinds.find_kind("other") is None


def test_the_registry_imports_the_modules_named_in_its_environment_variable(tmp_path, monkeypatch) -> None:
    (tmp_path / "another_kind.py").write_text(
        "from synth_ai.backend.jobs.kinds import JobKind, register_kind\n"
        "register_kind(JobKind(name='another', training_type='another', id_prefix='anotherjob', "
        "body_check='m:f', settings='m:f', runner='m:f', package='another_kind'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(kinds, "KINDS", dict(kinds.KINDS))  # the registration stays in this test
    assert kinds.find_kind("another") is None
    monkeypatch.setenv(kinds.EXTENSIONS_ENV, f" {TOY_MODULE} , another_kind,")
    assert kinds.job_kind("another").id_prefix == "anotherjob"
    assert kinds.job_kind("another").available()


def test_an_rl_jobs_spec_gives_placement_its_model(backend: BackendProcess) -> None:
    """The RL create route hands placement the model its spec names (`data.base_model`): a 14B model on this
    CPU-only backend without a Modal token is refused before anything is stored."""
    from rl_support import rl_body

    # LoRA: a full 14B would not fit the example's one training H100 either (refused for that first)
    body = rl_body("http://127.0.0.1:9", tables={"model": {"trainer_mode": "lora"}})
    body["data"]["base_model"] = "Qwen/Qwen3-14B"
    with backend.client() as client:
        refused = client.post("/rl/jobs", json=body)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "no_executor" and "Qwen/Qwen3-14B" in error["message"]
        assert client.get("/rl/jobs").json()["data"] == []
