"""One Executor interface (`backend/jobs/launching.py`) for local, torchrun and modal, and the one place that picks
one for a job (`synth_ai.backend.executors.executor_for`): real job rows in a real SQLite database, real processes."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from backend_support import TINY_TEXT, wait_for

from synth_ai.backend.executors import REGISTRY, TORCHRUN_NPROC_ENV, Executors
from synth_ai.backend.executors.modal import RELAY_MODULE, STATE_FILE
from synth_ai.backend.executors.placement import GPU_COUNT_ENV
from synth_ai.backend.jobs.launching import Executor, NoExecutorError
from synth_ai.backend.jobs.process_contract import WORKER_MODULE
from synth_ai.backend.server_settings import EXECUTORS, BackendSettings
from synth_ai.backend.store.db import Database
from synth_ai.backend.store.job_records import JobStore

BIG = "Qwen/Qwen3-32B"
ON_4_H100 = {"metadata": {"effective_config": {"compute": {"gpu_type": "H100", "gpu_count": 4, "nodes": 1}}}}


@pytest.fixture(autouse=True)
def no_modal_token(monkeypatch, tmp_path):
    monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
    monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "absent.toml"))
    monkeypatch.delenv(TORCHRUN_NPROC_ENV, raising=False)
    monkeypatch.setenv(GPU_COUNT_ENV, "0")


@pytest.fixture
def settings(tmp_path) -> BackendSettings:
    settings = BackendSettings(data_dir=tmp_path / "home", cancel_grace_s=1)
    settings.ensure_dirs()
    return settings


@pytest.fixture
def store(settings):
    db = Database(settings.db_path)
    db.migrate()
    yield JobStore(db)
    db.close()


def queued_job(store: JobStore, model: str = TINY_TEXT, payload: dict | None = None):
    with store.db.tx() as conn:
        job_id = store.insert(conn, kind="sft", training_type="sft_offline", model=model, payload=payload or {},
                              files=[])
    store.transition(job_id, "queued")
    return store.get(job_id)


def test_every_executor_name_has_an_executor_with_the_interface(store, monkeypatch):
    assert tuple(REGISTRY) == EXECUTORS
    for name, executor in REGISTRY.items():
        assert isinstance(executor, Executor) and executor.name == name
    row = queued_job(store)
    local = REGISTRY["local"].launch(row)
    assert local.argv[1:] == ["-m", WORKER_MODULE, row["id"]] and local.warm and local.processes == 1
    single = REGISTRY["torchrun"].launch(row)  # no GPU, no override: one plain worker, never the warm one
    assert single.argv == local.argv and not single.warm and single.executor == "torchrun"
    monkeypatch.setenv(TORCHRUN_NPROC_ENV, "2")
    ranks = REGISTRY["torchrun"].launch(row)
    assert ranks.processes == 2 and "--nproc-per-node=2" in ranks.argv and not ranks.warm
    assert ranks.argv[-3:] == ["-m", WORKER_MODULE, row["id"]] and "OMP_NUM_THREADS" in ranks.env
    relay = REGISTRY["modal"].launch(row)
    assert relay.argv[1:] == ["-m", RELAY_MODULE, row["id"]] and not relay.warm and relay.processes == 1


def test_the_chooser_follows_the_backend_setting_and_the_jobs_needs(store, monkeypatch):
    tiny, big = queued_job(store), queued_job(store, BIG, ON_4_H100)
    assert Executors("local").for_job(tiny) is REGISTRY["local"]
    assert Executors("torchrun").for_job(tiny) is REGISTRY["torchrun"]  # [compute] of a tiny model is ignored
    with pytest.raises(NoExecutorError) as refused:  # the type the scheduler catches, from below the executors
        Executors("local").for_job(big)
    assert "no Modal token" in refused.value.message
    monkeypatch.setenv(GPU_COUNT_ENV, "4")
    assert Executors("torchrun").for_job(big) is REGISTRY["torchrun"]
    monkeypatch.setenv(GPU_COUNT_ENV, "0")
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    assert Executors("local").for_job(big) is REGISTRY["modal"]  # more than this machine has: Modal takes it
    assert Executors("modal").for_job(tiny) is REGISTRY["modal"]
    assert list(Executors("local")) == list(REGISTRY.values())


@pytest.mark.parametrize("name", EXECUTORS)
def test_a_cancel_reaches_the_run_and_its_exit_is_read(name):
    executor = REGISTRY[name]
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                                 "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert executor.status(polite) is None
        executor.cancel(polite)
        polite.wait(timeout=30)
        assert executor.status(polite) == -signal.SIGTERM
        assert stubborn.stdout.readline().strip() == "ready"
        executor.cancel(stubborn, force=True)
        stubborn.wait(timeout=30)
        assert executor.status(stubborn) == -signal.SIGKILL
    finally:
        for proc in (polite, stubborn):
            proc.kill()
            proc.wait()


def test_after_a_restart_each_executor_settles_only_its_own_leftover(store, settings, caplog):
    """A worker is stopped by `local`, a torchrun launcher by `torchrun`; a Modal job's relay is left alone (it dies
    with its backend) and `modal` names the call the next relay reattaches to."""
    worker_row, launcher_row, relay_row = queued_job(store), queued_job(store), queued_job(store)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", WORKER_MODULE, worker_row["id"]])
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "torch.distributed.run",
                                 "-m", WORKER_MODULE, launcher_row["id"]])
    relay = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", RELAY_MODULE, relay_row["id"]])
    job_dir = settings.job_dir(relay_row["id"])
    job_dir.mkdir(parents=True)
    (job_dir / STATE_FILE).write_text(json.dumps({"call_id": "fc-test-call"}))
    procs = {worker_row["id"]: worker, launcher_row["id"]: launcher, relay_row["id"]: relay}
    try:
        for job_id, proc in procs.items():
            cmdline = Path(f"/proc/{proc.pid}/cmdline")
            wait_for(lambda cmdline=cmdline, job_id=job_id: job_id.encode() in cmdline.read_bytes(), timeout=10,
                     what="the process")
            store.update(job_id, worker_pid=proc.pid)
        rows = {job_id: store.get(job_id) for job_id in procs}
        for name in ("torchrun", "modal"):
            REGISTRY[name].reattach(rows[worker_row["id"]], settings)
        assert worker.poll() is None  # not theirs
        REGISTRY["local"].reattach(rows[worker_row["id"]], settings)
        assert worker.wait(timeout=30) == -signal.SIGTERM
        for name in ("local", "modal"):
            REGISTRY[name].reattach(rows[launcher_row["id"]], settings)
        assert launcher.poll() is None
        REGISTRY["torchrun"].reattach(rows[launcher_row["id"]], settings)
        assert launcher.wait(timeout=30) == -signal.SIGTERM
        with caplog.at_level(logging.INFO, logger="synth_ai.backend.scheduler"):
            for executor in Executors("local"):
                executor.reattach(rows[relay_row["id"]], settings)
        assert relay.poll() is None
        assert "fc-test-call" in caplog.text
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
