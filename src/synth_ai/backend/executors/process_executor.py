"""What every executor here shares: a job's run is one process the scheduler started on this machine (a worker, the
torchrun launcher, the Modal relay); its exit code is the job's, and a stop is a signal to it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from synth_ai.backend.jobs.process_contract import WORKER_MODULE
from synth_ai.processes import pid_alive


class ProcessExecutor:
    name = ""

    def status(self, proc: subprocess.Popen) -> int | None:
        return proc.poll()

    def cancel(self, proc: subprocess.Popen, *, force: bool = False) -> None:
        """SIGTERM: the run stops at its next safe point (a worker between steps, keeping its checkpoint; the relay
        cancels its Modal call if the job's cancel was requested). SIGKILL when forced."""
        try:
            proc.send_signal(signal.SIGKILL if force else signal.SIGTERM)
        except (ProcessLookupError, OSError):
            pass


def worker_argv(job_id: str) -> list[str]:
    """One job worker process: the job function every executor runs in the end."""
    return [sys.executable, "-m", WORKER_MODULE, job_id]


def stop_leftover(pid: int, grace_s: float) -> None:
    """A worker left by a dead backend: SIGTERM (it checkpoints and exits), then SIGKILL after the grace period."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + max(grace_s, 1)
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
