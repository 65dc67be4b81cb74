"""The scheduler: the API process's only part in running jobs.

A background thread that starts one worker process per queued job (up to `max_concurrent_jobs`), reaps workers
that exit, turns a cancel request into a stop (SIGTERM, then SIGKILL after a grace period), and at startup settles
every job a previous backend left `running`: resumed from its last checkpoint (the worker is started again and the
trainer picks up its checkpoint) or failed with the reason.

What differs per executor (the command that runs a job, how a stop is delivered, how its exit is read, what a
restart finds of an earlier run) is asked of the job's executor (`jobs.launching.Executor`); the API side hands the
scheduler the chooser (`synth_ai.backend.executors.Executors`), so this module never imports an executor.

Jobs are handed to a warm worker (a process that imported the training stack ahead of time, see
`synth_ai.backend.jobs.warm_worker`) when one is ready, else started cold. Workers are started from this one
long-lived thread because Linux's PR_SET_PDEATHSIG (which the worker uses to notice the backend dying) fires when
the *thread* that forked it exits.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.backend.jobs.kinds import find_kind, interactive_kinds
from synth_ai.backend.jobs.launching import Executor, ExecutorChooser, NoExecutorError
from synth_ai.backend.jobs.process_contract import (
    EXIT_INTERRUPTED,
    EXIT_RESUME,
    PARENT_ENV,
    one_line,
    resume_reason,
)
from synth_ai.backend.jobs.warm_worker import WarmPool
from synth_ai.backend.server_settings import BackendSettings
from synth_ai.backend.store import job_records as J
from synth_ai.backend.store.db import Database, loads

log = logging.getLogger("synth_ai.backend.scheduler")

TICK_S = 0.5


def _interactive(kind_name: str) -> bool:
    kind = find_kind(kind_name)
    return kind is not None and kind.interactive


def _resumable(kind_name: str) -> bool:
    kind = find_kind(kind_name)
    return kind is not None and kind.resumable


@dataclass
class _Running:
    job_id: str
    proc: subprocess.Popen
    executor: Executor
    log_path: Path
    started: float = field(default_factory=time.monotonic)
    term_sent_at: float | None = None
    killed: bool = False
    warm: bool = False  # handed to a warm worker (which may die before it claims the job)
    interactive: bool = False  # a kind a client holds open (JobKind.interactive): counted apart from batch jobs


class Scheduler:
    def __init__(self, settings: BackendSettings, db: Database, executors: ExecutorChooser) -> None:
        self.settings = settings
        self.db = db
        self.executors = executors
        self.store = J.JobStore(db)
        self._running: dict[str, _Running] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.warm = WarmPool(settings, self._worker_env())
        self._cold_only: set[str] = set()  # jobs whose warm hand-off failed: their next start is cold
        self._trains = False  # the store has had a file or a job (see _has_trained)

    # Lifecycle --------------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="synth-ai-scheduler", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def shutdown(self, timeout: float = 20.0) -> None:
        """Stop every worker (they keep their checkpoints; the jobs stay `running` for the next start to settle)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout + 5)

    def running_jobs(self) -> list[str]:
        with self._lock:
            return list(self._running)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # the loop must survive a bad tick (a locked db, a vanished job)
                log.exception("scheduler tick failed")
            self._wake.wait(TICK_S)
            self._wake.clear()
        self._stop_all(timeout=max(1.0, float(self.settings.cancel_grace_s)))

    def _stop_all(self, timeout: float = 20.0) -> None:
        with self._lock:
            running = list(self._running.values())
        for item in running:  # no cancel_requested: the runs keep their checkpoints (or Modal calls)
            item.executor.cancel(item.proc)
        deadline = time.monotonic() + timeout
        for item in running:
            try:
                item.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                item.executor.cancel(item.proc, force=True)
                item.proc.wait()
            log.info("worker for %s stopped with the backend (exit %s)", item.job_id, item.proc.returncode)
        with self._lock:
            self._running.clear()
        self.warm.close()

    # One pass ---------------------------------------------------------------------------------------------------
    def tick(self) -> None:
        self._reap()
        self._handle_cancels()
        if not self._stop.is_set():
            self.warm.maintain(wanted=self._has_trained())
        self._spawn_queued()

    def _has_trained(self) -> bool:
        """Whether this backend trains: a file or a job in its store (then for good). Until then no warm worker is
        kept (its 400 MB and seconds of imports are spent for nothing by a backend that only serves or reads)."""
        if not self._trains:
            row = self.db.conn().execute(
                "SELECT EXISTS (SELECT 1 FROM files) OR EXISTS (SELECT 1 FROM jobs)").fetchone()
            self._trains = bool(row[0])
        return self._trains

    def _reap(self) -> None:
        with self._lock:
            items = list(self._running.values())
        for item in items:
            code = item.executor.status(item.proc)
            if code is None:
                continue
            with self._lock:
                self._running.pop(item.job_id, None)
            self._settle_exit(item, code)

    def _settle_exit(self, item: _Running, code: int) -> None:
        row = self.store.get(item.job_id)
        if row is None or row["status"] in J.TERMINAL:
            return
        if item.warm and row["status"] == "queued" and not row["cancel_requested"] and not self._stop.is_set():
            # The warm worker died before it claimed the job: the job never started, so start it again, cold.
            log.warning("warm worker pid %s died (exit %s) before starting job %s; starting it cold",
                        item.proc.pid, code, item.job_id)
            self.store.update(item.job_id, attempts=max(0, row["attempts"] - 1), worker_pid=None)
            self._cold_only.add(item.job_id)
            self.wake()
            return
        if row["cancel_requested"]:
            how = "was killed after the grace period" if item.killed else f"exited with code {code}"
            self.store.transition(item.job_id, "cancelled", only_from=J.ACTIVE,
                                  event=(J.EV_CANCELLED, f"Job cancelled; the worker {how}.",
                                         {"exit_code": code}, "warning"),
                                  message="cancelled by request")
            return
        if code == EXIT_INTERRUPTED and not self._stop.is_set():
            # Stopped from outside (not by us): treat like a restart.
            self._requeue_or_fail(row, "its worker was stopped from outside the backend")
            return
        if code == EXIT_INTERRUPTED:
            return
        # The worker died without recording an end (SIGKILL from the OOM killer, a preempted host, a crash):
        # like a restarted backend, resume from the last checkpoint while attempts are left.
        reason = f"the worker process exited with code {code}" if code >= 0 else \
            f"the worker process was killed by signal {-code} ({_signame(-code)})"
        if code == EXIT_RESUME:  # the worker's last line says why its attempt ended
            reason = resume_reason(_tail(item.log_path)) or reason
        self._requeue_or_fail(row, reason, {"exit_code": code, "log_tail": _tail(item.log_path)})

    def _handle_cancels(self) -> None:
        with self._lock:
            items = list(self._running.values())
        now = time.monotonic()
        for item in items:
            if item.term_sent_at is None:
                row = self.store.get(item.job_id)
                if row is not None and row["cancel_requested"]:
                    item.executor.cancel(item.proc)
                    item.term_sent_at = now
            elif not item.killed and now - item.term_sent_at > self.settings.cancel_grace_s:
                item.executor.cancel(item.proc, force=True)
                item.killed = True

    def _spawn_queued(self) -> None:
        if self._stop.is_set():
            return
        with self._lock:
            interactive = sum(1 for item in self._running.values() if item.interactive)
            free = {False: self.settings.max_concurrent_jobs - (len(self._running) - interactive),
                    True: self.settings.max_interactive_jobs - interactive}
            busy = set(self._running)
        if max(free.values()) <= 0:
            return
        rows = [row for pool, room in free.items() if room > 0 for row in self._queued(pool, room + len(busy))]
        rows.sort(key=lambda row: (row["updated_at"], row["created_at"]))
        for row in rows:
            pool = _interactive(row["kind"])
            if free[pool] <= 0 or row["id"] in busy:
                continue
            if self.warm.warming() and row["id"] not in self._cold_only:
                break  # the warm worker is importing already: a cold start now would only be slower
            if row["cancel_requested"]:
                self.store.transition(row["id"], "cancelled", only_from={"queued"},
                                      event=(J.EV_CANCELLED, "Job cancelled before it started.", None, "warning"))
                continue
            try:
                self._spawn(row)
            except NoExecutorError as exc:  # the job asks for what nothing here can run (docs/scale.md)
                reason = f"{exc.message} {exc.hint or ''}".strip()
                self.store.transition(row["id"], "failed", only_from={"queued"}, error=reason,
                                      event=(J.EV_FAILED, f"Job failed: {reason}", {"reason": reason}, "error"),
                                      message=reason)
                continue
            except OSError as exc:  # cannot fork, no python, disk full for the log: the job cannot run
                reason = f"the backend could not start a worker process: {exc}"
                log.exception("starting a worker for %s failed", row["id"])
                self.store.transition(row["id"], "failed", only_from={"queued"}, error=reason,
                                      event=(J.EV_FAILED, f"Job failed: {reason}", {"reason": reason}, "error"),
                                      message=reason)
                continue
            free[pool] -= 1

    def _queued(self, interactive: bool, limit: int) -> list[Any]:
        """The oldest queued jobs of one pool (interactive kinds, or the rest), at most `limit`."""
        names = interactive_kinds()
        marks = ", ".join("?" * len(names)) or "''"
        where = f"kind IN ({marks})" if interactive else f"kind NOT IN ({marks})"
        return self.db.conn().execute(
            f"SELECT * FROM jobs WHERE status = 'queued' AND {where} ORDER BY updated_at, created_at LIMIT ?",
            (*names, limit)).fetchall()

    def _worker_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SYNTH_AI_HOME"] = str(self.settings.data_dir)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def _spawn(self, row) -> None:
        job_id = row["id"]
        executor = self.executors.for_job(row)
        launch = executor.launch(row)
        job_dir = self.settings.job_dir(job_id)
        job_dir.mkdir(parents=True, exist_ok=True)
        log_path = job_dir / "worker.log"
        attempts = row["attempts"] + 1
        # Count the attempt before the process exists: a crash right after spawn still counts.
        self.store.update(job_id, attempts=attempts)
        cold = job_id in self._cold_only
        self._cold_only.discard(job_id)
        with open(log_path, "ab") as log_file:
            log_file.write(f"\n=== attempt {attempts} ===\n".encode())
            log_file.flush()
            warm = self.warm.take(job_id) if launch.warm and not cold else None
            proc = warm
            if proc is None:
                env = {**self._worker_env(), **launch.env}
                env[PARENT_ENV] = str(os.getpid())
                proc = subprocess.Popen(
                    launch.argv,
                    stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=env,
                    cwd=str(job_dir), start_new_session=True, close_fds=True)
        self.store.update(job_id, worker_pid=proc.pid)
        with self._lock:
            self._running[job_id] = _Running(job_id, proc, executor, log_path, warm=warm is not None,
                                             interactive=_interactive(row["kind"]))
        log.info("%s worker pid %s for job %s (attempt %s)", "cold" if warm is None else "warm",
                 proc.pid, job_id, attempts)

    # Restart settlement -----------------------------------------------------------------------------------------
    def settle_on_startup(self) -> list[dict[str, str]]:
        """Settle jobs a previous backend left active; returns what was done, for the log."""
        actions: list[dict[str, str]] = []
        rows = self.db.conn().execute("SELECT * FROM jobs WHERE status IN ('queued', 'running')").fetchall()
        for row in rows:
            pid = row["worker_pid"]
            if pid:  # each executor settles what its own earlier run left (a surviving worker is stopped)
                for executor in self.executors:
                    executor.reattach(row, self.settings)
            if row["status"] == "queued":
                if pid:
                    self.store.update(row["id"], worker_pid=None)
                actions.append({"job_id": row["id"], "action": "kept queued"})
                continue
            if row["cancel_requested"]:
                self.store.transition(row["id"], "cancelled", only_from={"running"},
                                      event=(J.EV_CANCELLED, "Job cancelled (the backend restarted while it was "
                                                             "stopping).", None, "warning"))
                actions.append({"job_id": row["id"], "action": "cancelled"})
                continue
            actions.append({"job_id": row["id"],
                            "action": self._requeue_or_fail(row, "the backend restarted while it was running")})
        return actions

    def _requeue_or_fail(self, row, why: str, extra: dict | None = None) -> str:
        """Resume the job from its last checkpoint (queued for a new worker) while attempts are left, else fail it
        with every attempt's reason."""
        job_id, attempts = row["id"], row["attempts"]
        data = {"reason": why, "attempts": attempts, "max_attempts": self.settings.max_attempts, **(extra or {})}
        if not self.settings.resume_on_restart:
            reason = f"{why}, and resuming is disabled (SYNTH_AI_BACKEND_RESUME=0)"
        elif not _resumable(row["kind"]):
            reason = f"{why}; {row['kind'].upper()} jobs cannot be resumed"
        elif attempts >= self.settings.max_attempts:
            earlier = self._earlier_reasons(job_id)
            reason = out_of_attempts(why, earlier, self.settings.max_attempts)
            if earlier:
                data["attempt_reasons"] = [*earlier, why]
        else:
            self.store.transition(
                job_id, "queued", only_from={"running"}, worker_pid=None,
                event=(J.EV_REQUEUED, f"Job will resume from its last checkpoint (attempt {attempts + 1} of "
                                      f"{self.settings.max_attempts}): {why}.", data, "warning"),
                message=f"requeued: {why}")
            self.wake()
            return "resumed"
        self.store.transition(job_id, "failed", only_from={"running", "queued"}, error=reason,
                              event=(J.EV_FAILED, f"Job failed: {reason}", {**data, "reason": reason}, "error"),
                              message=reason)
        return "failed"

    def _earlier_reasons(self, job_id: str) -> list[str]:
        """Why each earlier attempt of the job ended, from its requeue events."""
        reasons = []
        for row in self.db.conn().execute("SELECT data FROM events WHERE job_id = ? AND type LIKE ? ORDER BY seq",
                                          (job_id, f"%.{J.EV_REQUEUED}")):
            data = loads(row["data"]) or {}
            if isinstance(data, dict) and data.get("reason"):
                reasons.append(str(data["reason"]))
        return reasons


def _signame(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return str(num)


def out_of_attempts(why: str, earlier: list[str], used: int) -> str:
    """Why a job that has used every attempt failed: each attempt's reason once, or one reason when all of its
    attempts ended alike (`why` is the last attempt's, `earlier` those of the attempts before it)."""
    reasons = [one_line(r) for r in [*earlier, why]]
    if used <= 1:
        return f"{reasons[-1]}, and it has used its only attempt"
    if len(reasons) == 1:  # the earlier attempts left no reason (e.g. a backend that restarted with them used)
        return f"{reasons[-1]}, and it has used all {used} attempts"
    if len(set(reasons)) == 1:
        ended = f"all {used} attempts" if len(reasons) == used else f"{len(reasons)} of its {used} attempts"
        return f"{reasons[-1]} ({ended} ended this way)"
    listed = "; ".join(f"attempt {n}: {r}" for n, r in enumerate(reasons, start=1))
    return f"it has used all {used} attempts ({listed})"


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
