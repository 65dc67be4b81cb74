"""Why a worker says it stopped (`backend/jobs/worker.py`, `StopSignal.why`), read from a real job database and, for
the backend's part, real processes: the kernel's PR_SET_PDEATHSIG can deliver the SIGTERM while a killed backend is
still exiting (its other threads are the worker's parent for a moment), so a parent that leaves within the wait means
the backend went away; one that stays means it is shutting down on purpose. A cancel also arrives as a SIGTERM: the
database tells it apart."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from synth_ai.backend.jobs.worker import StopSignal
from synth_ai.backend.store.db import Database
from synth_ai.backend.store.job_records import JobStore

# The middle process stands for the backend: it starts the "worker", waits until the worker has its imports and is
# about to ask (so a slow start under load cannot outlast `linger`), then leaves after `linger` seconds. The worker
# has had its SIGTERM (terminated is set) while its parent is still there, and asks why.
SCRIPT = textwrap.dedent("""
    import os, subprocess, sys, time
    linger, db_path, job_id = float(sys.argv[1]), sys.argv[2], sys.argv[3]
    worker = (
        "import os, sys\\n"
        "from pathlib import Path\\n"
        "from synth_ai.backend.jobs.worker import StopSignal\\n"
        "from synth_ai.backend.store.db import Database\\n"
        "from synth_ai.backend.store.job_records import JobStore\\n"
        "stop = StopSignal(JobStore(Database(Path(sys.argv[1]))), sys.argv[2], os.getppid())\\n"
        "stop.terminated.set()\\n"
        "sys.stderr.write('asking\\\\n'); sys.stderr.flush(); sys.stderr.close()\\n"
        "print(stop.why(), flush=True)\\n")
    child = subprocess.Popen([sys.executable, "-c", worker, db_path, job_id], stderr=subprocess.PIPE, text=True)
    child.stderr.readline()
    time.sleep(linger)
""")


@pytest.fixture
def store(tmp_path: Path):
    db = Database(tmp_path / "backend.sqlite3")
    db.migrate()
    yield JobStore(db)
    db.close()


def running_job(store: JobStore) -> str:
    with store.db.tx() as conn:
        job_id = store.insert(conn, kind="rl", training_type="rl_online", model="m", payload={}, files=[],
                              prefix="rljob")
    store.transition(job_id, "running")
    return job_id


def ask_worker(store: JobStore, job_id: str, linger: float) -> str:
    """Run the backend stand-in with the worker's output on a pipe the worker keeps after its parent leaves."""
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(linger), str(store.db.path), job_id],
                            stdout=subprocess.PIPE, text=True)
    text, _ = proc.communicate(timeout=60)  # ends when the worker (the last holder of the pipe) exits
    return text.strip()


def test_a_parent_that_leaves_during_the_wait_went_away(store: JobStore):
    assert ask_worker(store, running_job(store), 0.3) == "the backend process went away (it was killed or crashed)"


def test_a_parent_that_stays_is_shutting_down(store: JobStore):
    assert ask_worker(store, running_job(store), 5.0) == "the backend is shutting down (stopped or restarting)"


def test_a_cancel_is_told_apart_from_its_sigterm(store: JobStore):
    job_id = running_job(store)
    store.request_cancel(job_id)
    assert ask_worker(store, job_id, 5.0) == "the job was cancelled"


def test_a_job_settled_or_deleted_elsewhere_says_so(store: JobStore):
    failed, deleted = running_job(store), running_job(store)
    store.transition(failed, "failed", error="settled by a restart")
    with store.db.tx() as conn:
        conn.execute("DELETE FROM jobs WHERE id = ?", (deleted,))
    assert StopSignal(store, failed, None).why() == "the job was already failed"
    assert StopSignal(store, deleted, None).why() == "the job was deleted from the backend's database"


def test_a_sigterm_without_a_backend_parent_says_what_it_was(store: JobStore):
    """A worker in a Modal container has no backend parent: its SIGTERM comes from the platform."""
    stop = StopSignal(store, running_job(store), None)
    stop.terminated.set()
    assert stop.why() == "its process was sent SIGTERM (the machine or container running it is stopping)"
