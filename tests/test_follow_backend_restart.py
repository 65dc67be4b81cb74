"""A follower (`train` following, `jobs follow`) whose backend on this machine dies and comes back: it says once
that it waits, reconnects and follows the job to its end; a backend that does not come back ends the follow at the
poll timeout (exit 7), not after a few failed calls (exit 5).

A real `synth-ai backend serve` on a fixed port, killed with SIGKILL and started again on the same data dir and
port. The job is written into the backend's SQLite the way a worker writes it (the backend cannot tell), so no
training is needed. The follower's sleep is the test's hook: the backend is restarted from it, so the order of
events does not depend on timing, and the deadline is read from an injected clock.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from backend_support import TINY_TEXT, BackendProcess
from conftest import free_port
from synth_ai.client.follow import follow_job
from synth_ai.client.follow_common import EV_BACK, EV_WAITING
from synth_ai.client.resources import SynthAPI
from synth_ai.client.transport import Transport
from synth_ai.errors import DeadlineError


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _store(data_dir: Path):
    from synth_ai.backend.store.db import Database
    from synth_ai.backend.store.job_records import JobStore

    return JobStore(Database(data_dir / "backend" / "backend.sqlite3"))


def _running_job(store) -> str:
    with store.db.tx() as conn:
        job_id = store.insert(conn, kind="sft", training_type="sft_offline", model=TINY_TEXT, payload={}, files=[])
    store.transition(job_id, "running")
    store.add_event(job_id, "sft.progress", "step 1/2", {"step": 1, "total_steps": 2})
    return job_id


@pytest.fixture
def dead_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A backend with one running job, then killed; the job store stays open for the test."""
    import synth_ai.client.transport as transport

    monkeypatch.setattr(transport.RetryPolicy, "backoff", lambda self, attempt: 0.0)
    data_dir = tmp_path / "home"
    backend = BackendProcess(data_dir, port=free_port(), env={"SYNTH_AI_BACKEND_WARM_WORKER": "0"}).start()
    store = _store(data_dir)
    job_id = _running_job(store)
    key = backend.key
    backend.kill(signal.SIGKILL)
    yield backend, store, job_id, key
    store.db.close()
    backend.stop()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "polling"])
def test_a_follower_waits_for_a_restarting_local_backend_then_follows_to_the_end(dead_backend, stream):
    backend, store, job_id, key = dead_backend
    clock, naps = _Clock(), []
    restarted: list[BackendProcess] = []

    def sleep(seconds: float) -> None:
        clock.now += seconds
        naps.append(seconds)
        if len(naps) == 8 and not restarted:  # past the 5 failures in a row that used to end the follow
            store.transition(job_id, "succeeded", event=("sft.job.completed", "done", None, "info"),
                             fine_tuned_model=f"ft:{TINY_TEXT}:{job_id}")
            restarted.append(BackendProcess(backend.data_dir, port=backend.port,
                                            env={"SYNTH_AI_BACKEND_WARM_WORKER": "0"}).start())

    updates = []
    api = SynthAPI(Transport(f"{backend.url}/api", key))
    try:
        result = follow_job(api.sft, job_id, interval=0.5, timeout=600, on_update=updates.append, clock=clock,
                            sleep=sleep, stream=stream)
    finally:
        api.close()
        for process in restarted:
            process.stop()
    assert restarted, "the follower gave up before the backend came back"
    assert result.status == "succeeded" and result.fine_tuned_model == f"ft:{TINY_TEXT}:{job_id}"
    types = [u.data.get("type") for u in updates if u.kind == "notice"]
    assert types.count(EV_WAITING) == 1 and types.count(EV_BACK) == 1, types
    assert types.index(EV_WAITING) < types.index(EV_BACK)


def test_a_local_backend_that_stays_down_ends_the_follow_at_the_poll_timeout(dead_backend):
    backend, _store_, job_id, key = dead_backend
    clock = _Clock()

    def sleep(seconds: float) -> None:
        clock.now += seconds

    api = SynthAPI(Transport(f"{backend.url}/api", key))
    try:
        with pytest.raises(DeadlineError) as info:
            follow_job(api.sft, job_id, interval=0.5, timeout=20, clock=clock, sleep=sleep)
    finally:
        api.close()
    assert info.value.exit_code == 7 and job_id in info.value.message
    assert clock.now >= 20
