"""One job's worker process: `python -m synth_ai.backend.jobs.worker <job_id>`.

Started by the backend's scheduler, one process per job run: for its job, or ahead of time as a warm worker
(`--warm`, see `synth_ai.backend.jobs.warm_worker`) that is handed the job id later. It loads the job from SQLite,
runs the trainer and writes events, metrics and the final status to the database itself. torch, transformers and
peft are imported here (through the trainer), never in the API process.

Stopping: the scheduler asks for a cancel by setting `cancel_requested` and sending SIGTERM; the worker tells the
trainer to stop (`should_stop()`), records `cancelled` and exits 0. If the backend itself goes away (shutdown, or
killed: the kernel sends SIGTERM through PR_SET_PDEATHSIG, and the parent pid changes), the trainer stops at its
next check, keeps its checkpoint, and the worker exits with EXIT_INTERRUPTED leaving the job `running`, for the
next backend start to resume.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from synth_ai.backend.jobs.job_tracking import close_tracking, start_tracking
from synth_ai.backend.jobs.kinds import job_kind
from synth_ai.backend.jobs.process_contract import (  # noqa: F401 - EXIT_* and PARENT_ENV re-exported
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_RESUME,
    PARENT_ENV,
    die_with_parent,
    resume_line,
)
from synth_ai.backend.server_settings import BackendSettings
from synth_ai.backend.store import job_records as J
from synth_ai.backend.store.db import Database, loads, utcnow
from synth_ai.backend.trainers.common import TrainingCancelled
from synth_ai.backend.trainers.distributed import rank_from_env
from synth_ai.config.job_specs import JobSpec
from synth_ai.env.extras import install_commands
from synth_ai.processes import pid_alive

CANCEL_POLL_S = 0.5
PARENT_EXIT_WAIT_S = 1.0  # how long a SIGTERM'd worker watches for its parent's exit before calling it a shutdown

log = logging.getLogger("synth_ai.backend.jobs.worker")


class Reporter:
    """What a trainer gets to report with: events and metrics go straight to SQLite."""

    def __init__(self, store: J.JobStore, job_id: str, kind: str, attempt: int = 1) -> None:
        self.store = store
        self.job_id = job_id
        self.kind = kind
        self.attempt = attempt  # which run of the job this worker is: steps re-run after a restart carry it
        self.last_step = -1
        self.tracker: Any = None  # the job's experiment trackers (backend.jobs.job_tracking), when it has any
        self.sample_rows = 0  # rows of the sample tables trainers write for the trackers (none without trackers)

    def event(self, type: str, message: str, data: dict[str, Any] | None = None, level: str = "info") -> int:  # noqa: A002
        prefix = job_kind(self.kind).event_prefix
        full = type if type.startswith(f"{prefix}.") else f"{prefix}.{type}"
        seq = self.store.add_event(self.job_id, full, message, data, level)
        if self.tracker is not None:
            self.tracker.event(data)  # only queues: a sample table goes to the trackers
        return seq

    def metric(self, name: str, step: int, value: float, phase: str = "train") -> None:
        self.metrics([(name, step, value, phase)])

    def metrics(self, points: list[tuple[str, int, float, str]]) -> None:
        """Several points in one transaction: readers see all of them or none."""
        if points:
            self.last_step = max(self.last_step, *(int(p[1]) for p in points))
            self.store.add_metrics(self.job_id, points)
            if self.tracker is not None:
                self.tracker.points(points)  # only queues


class StopSignal:
    """`should_stop()` for the trainer: a cancel in the database, SIGTERM, or the backend gone."""

    def __init__(self, store: J.JobStore, job_id: str, parent_pid: int | None, *, launched: bool = False) -> None:
        self.store = store
        self.job_id = job_id
        self.parent_pid = parent_pid
        self.launched = launched  # started by a launcher (torchrun): the backend is not our parent, so watch its pid
        self.terminated = threading.Event()
        self._cancelled = False
        self._checked_at = 0.0
        self.stopped = False
        self._why: str | None = None

    def cancelled(self, *, fresh: bool = False) -> bool:
        now = time.monotonic()
        if not self._cancelled and (fresh or now - self._checked_at >= CANCEL_POLL_S):
            self._checked_at = now
            row = self.store.get(self.job_id)
            self._cancelled = bool(row is None or row["cancel_requested"] or row["status"] in J.TERMINAL)
        return self._cancelled

    def parent_gone(self) -> bool:
        if self.parent_pid is None:
            return False
        if self.launched:
            return not pid_alive(self.parent_pid)
        return os.getppid() != self.parent_pid

    def why(self) -> str:
        """Why the job stopped, worded to follow "stopped because": a cancel, the job settled or deleted elsewhere,
        the backend killed or shutting down, or SIGTERM from someone else. The first answer sticks, so the trainer's
        event and the worker's agree (a backend that shuts down leaves soon after, which is no new reason)."""
        if self._why is None:
            self._why = self._find_why()
        return self._why

    def _find_why(self) -> str:
        if self.cancelled(fresh=True):  # a cancel also sends SIGTERM: the database says which it was
            row = self.store.get(self.job_id)
            if row is None:
                return "the job was deleted from the backend's database"
            if row["cancel_requested"]:
                return "the job was cancelled"
            return f"the job was already {row['status']}"
        if self.terminated.is_set():
            # The kernel's SIGTERM (PR_SET_PDEATHSIG) fires when the thread that started us exits; while a killed
            # backend's other threads are still exiting, they are our parent for a moment. A backend that shuts
            # down on purpose stays up while its workers stop, so a parent that leaves within this wait was killed.
            deadline = time.monotonic() + PARENT_EXIT_WAIT_S
            while not self.parent_gone() and time.monotonic() < deadline:
                time.sleep(0.02)
        if self.parent_gone():
            return "the backend process went away (it was killed or crashed)"
        if self.terminated.is_set():
            if self.parent_pid is None:  # not started by a backend (a Modal container): the platform stopped it
                return "its process was sent SIGTERM (the machine or container running it is stopping)"
            return "the backend is shutting down (stopped or restarting)"
        # Only a torchrun rank gets here: the ranks stop together when any of them is told to.
        return "another process of the job was told to stop"

    def __call__(self) -> bool:
        stop = self.terminated.is_set() or self.parent_gone() or self.cancelled()
        if stop:
            self.stopped = True
        return stop


def job_spec(job: Any, files: dict[str, Path]) -> JobSpec:
    """The run's typed view of the job (its kind's spec type): the stored payload, the job's id and model, and the
    local paths of its files."""
    return job_kind(job["kind"]).spec_of(loads(job["payload"]) or {}, job_id=job["id"], model=job["model"],
                                         files={role: str(path) for role, path in files.items()})


def _file_paths(db: Database, settings: BackendSettings, job_id: str) -> dict[str, Path]:
    from synth_ai.backend.store.blobs import BlobStore

    blobs = BlobStore(settings.blobs_dir, settings.tmp_dir)
    rows = db.conn().execute(
        "SELECT jf.role, f.sha256, f.id FROM job_files jf JOIN files f ON f.id = jf.file_id WHERE jf.job_id = ?",
        (job_id,)).fetchall()
    paths: dict[str, Path] = {}
    for row in rows:
        path = blobs.path_for(row["sha256"])
        if not path.is_file():
            raise FileNotFoundError(f"file {row['id']} ({row['role']}) is missing from the blob store: {path}")
        paths[row["role"]] = path
    return paths


def run(job_id: str) -> int:
    settings = BackendSettings.load()
    db = Database(settings.db_path)
    store = J.JobStore(db)
    job = store.get(job_id)
    if job is None:
        print(f"worker: job {job_id} not found", file=sys.stderr)
        return EXIT_FAILED
    kind = job["kind"]
    parent = int(os.environ[PARENT_ENV]) if os.environ.get(PARENT_ENV, "").isdigit() else None
    rank, world = rank_from_env()
    stop = StopSignal(store, job_id, parent, launched=world > 1)
    signal.signal(signal.SIGTERM, lambda *_: stop.terminated.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is not None:  # started by a backend (not in a Modal container): die with it
        die_with_parent()
    if rank != 0:
        return _follow(settings, db, job, stop)
    workdir = settings.job_dir(job_id) / "work"
    code = _claim(store, job, stop, workdir, world)
    if world > 1:  # the other ranks, on any node, learn only from rank 0 whether the job is theirs to train
        _tell_followers(claimed=code is None)
    if code is not None:
        return code
    reporter = Reporter(store, job_id, kind, attempt=job["attempts"])
    reporter.tracker = start_tracking(settings, store, job)
    if reporter.tracker is not None:
        reporter.sample_rows = reporter.tracker.settings.sample_rows
    try:
        return _run_claimed(settings, db, store, job, workdir, reporter, stop)
    finally:
        close_tracking(reporter.tracker, store, job_id)


def _claim(store: J.JobStore, job: Any, stop: StopSignal, workdir: Path, world: int) -> int | None:
    """Rank 0 takes the job (`running`): None when it did, else the exit code of a worker with nothing to train."""
    job_id = job["id"]
    if stop.parent_gone():
        return EXIT_INTERRUPTED
    if job["status"] in J.TERMINAL:
        return EXIT_OK
    if stop.cancelled(fresh=True):
        store.transition(job_id, "cancelled", only_from={"queued", "running"},
                         event=(J.EV_CANCELLED, "Job cancelled before training started.", None, "warning"))
        return EXIT_OK
    workdir.mkdir(parents=True, exist_ok=True)
    resumed = job["attempts"] > 1
    # Under torchrun the scheduler's pid is the launcher's, which stays the job's worker_pid (what a restart stops).
    pid_field = {"worker_pid": os.getpid()} if world == 1 else {}
    claimed = store.transition(job_id, "running", only_from={"queued", "running"}, **pid_field,
                               started_at=job["started_at"] or utcnow(),
                     event=(J.EV_WORKER_STARTED, ("Worker restarted to resume" if resumed else "Worker started")
                            + f" (attempt {job['attempts']}, pid {os.getpid()})",
                            {"attempt": job["attempts"], "resumed": resumed, "pid": os.getpid(),
                             "workdir": str(workdir)}, "info"),
                     message=f"worker {os.getpid()} started")
    return None if claimed else EXIT_OK  # not claimed: cancelled (or settled) since the scheduler started us


def _tell_followers(*, claimed: bool) -> bool:
    """Rank 0's word to every other rank, through the job's process group (which every rank joins here): 1 to
    train, 0 to end. The group reaches ranks on other nodes, whose copy of the database may not show rank 0's
    claim (a Modal container of another node reads a snapshot of the volume)."""
    from synth_ai.backend.trainers.distributed import current

    return current().any(claimed)


def _run_claimed(settings: BackendSettings, db: Database, store: J.JobStore, job: Any, workdir: Path,
                 reporter: Reporter, stop: StopSignal) -> int:
    """Train the claimed job and settle it: succeeded, failed, cancelled, or interrupted (left running)."""
    job_id = job["id"]
    try:
        result = _train(settings, db, job, workdir, reporter, stop)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes the job's reason
        if stop.cancelled(fresh=True):
            _record_cancel(store, job_id, reporter)
            return EXIT_OK
        if stop.terminated.is_set() or stop.parent_gone():
            return _interrupted(store, job_id, reporter, stop.why())
        reason = _reason(exc)
        if getattr(exc, "resume_in_new_worker", False):  # the scheduler requeues it (process_contract.EXIT_RESUME)
            traceback.print_exc()
            print(resume_line(job["attempts"], reason), file=sys.stderr, flush=True)
            return EXIT_RESUME
        store.transition(job_id, "failed", only_from={"running"}, error=reason,
                         event=(J.EV_FAILED, f"Job failed: {reason}",
                                {"reason": reason, "error_type": type(exc).__name__,
                                 "traceback": traceback.format_exc(limit=8)[-4000:]}, "error"),
                         message=reason)
        traceback.print_exc()
        return EXIT_FAILED

    completed = bool(result.get("fine_tuned_model")) and not result.get("stopped") and not result.get("cancelled")
    if stop.cancelled(fresh=True):
        _record_cancel(store, job_id, reporter)
        return EXIT_OK
    if not completed and stop.stopped:
        return _interrupted(store, job_id, reporter, stop.why())
    if not completed:
        reason = "the trainer returned without a fine-tuned model"
        store.transition(job_id, "failed", only_from={"running"}, error=reason,
                         event=(J.EV_FAILED, f"Job failed: {reason}", {"reason": reason, "result": result}, "error"),
                         message=reason)
        return EXIT_FAILED

    fine_tuned = str(result["fine_tuned_model"])
    data = {k: v for k, v in result.items() if isinstance(v, (str, int, float, bool)) or v is None}
    data["fine_tuned_model"] = fine_tuned
    store.transition(job_id, "succeeded", only_from={"running"}, fine_tuned_model=fine_tuned, error=None,
                     event=(J.EV_COMPLETED, f"Job completed: {fine_tuned}", data, "info"),
                     message=f"fine-tuned model {fine_tuned}")
    return EXIT_OK


def _train(settings: BackendSettings, db: Database, job: Any, workdir: Path, reporter: Any,
           stop: StopSignal) -> dict[str, Any]:
    """The job function: the same for every executor (each torchrun rank, a Modal container, the local worker)."""
    from synth_ai.backend.store.model_store import ModelStore

    spec = job_spec(job, _file_paths(db, settings, job["id"]))
    model_store = ModelStore(settings.data_dir)
    return job_kind(job["kind"]).run(spec, workdir=workdir, model_store=model_store, reporter=reporter,
                                     should_stop=stop)


def _follow(settings: BackendSettings, db: Database, job: Any, stop: StopSignal) -> int:
    """A torchrun rank other than 0: trains its share and writes nothing (rank 0 reports and settles the job).
    It trains only when rank 0 says it claimed the job (`_tell_followers`): a rank 0 that ends the job without
    training (cancelled before it started) tells it so instead of leaving it waiting in the process group."""
    if not _tell_followers(claimed=False):
        return EXIT_OK
    try:
        _train(settings, db, job, settings.job_dir(job["id"]) / "work", None, stop)
    except BaseException as exc:  # noqa: BLE001 - rank 0 records why; this rank's traceback goes to worker.log
        if stop.stopped or isinstance(exc, TrainingCancelled):  # a stop agreed with rank 0 is no failure
            return EXIT_INTERRUPTED
        traceback.print_exc()
        return EXIT_FAILED
    return EXIT_OK


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    hint = getattr(exc, "hint", None)  # a SynthError's fix belongs with the reason (the job log shows only this)
    if isinstance(hint, str) and hint.strip() and hint.strip() not in text:
        text = f"{text} Hint: {hint.strip()}"
    if isinstance(exc, ModuleNotFoundError):
        text = (f"a dependency of the trainer is not installed ({exc.name}); add the training extra to the "
                f"backend's environment and restart it:\n{install_commands('train', 'synth-ai backend start')}")
    elif isinstance(exc, ImportError):
        text = f"the trainer could not be loaded: {text}"
    return text[:2000]


def _record_cancel(store: J.JobStore, job_id: str, reporter: Reporter) -> None:
    step = reporter.last_step
    where = f" at step {step}" if step >= 0 else ""
    store.transition(job_id, "cancelled", only_from={"queued", "running"},
                     event=(J.EV_CANCELLED, f"Job cancelled; the worker stopped{where}.",
                            {"last_step": step if step >= 0 else None}, "warning"),
                     message="cancelled by request")


def _interrupted(store: J.JobStore, job_id: str, reporter: Reporter, why: str) -> int:
    step = reporter.last_step
    store.add_event(job_id, f"{reporter.kind}.{J.EV_INTERRUPTED}",
                    f"Worker stopped because {why}; the job resumes from its last checkpoint when the backend "
                    "starts again.", {"last_step": step if step >= 0 else None}, "warning")
    return EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--warm"]:  # wait for a job with the training stack imported (synth_ai.backend.jobs.warm_worker)
        from synth_ai.backend.jobs.warm_worker import serve

        return serve(run)
    if len(args) != 1:
        print("usage: python -m synth_ai.backend.jobs.worker <job_id>", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(args[0])


if __name__ == "__main__":
    sys.exit(main())
