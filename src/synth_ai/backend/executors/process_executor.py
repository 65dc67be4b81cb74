"""What every executor here shares: a job's run is one process the scheduler started on this machine (a worker, the
torchrun launcher, the Modal relay); its exit code is the job's, and a stop is a signal to it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from synth_ai.backend.jobs.process_contract import WORKER_MODULE, worker_command_line
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


TORCHRUN_MODULE = "torch.distributed.run"


def stop_leftover_worker(row: Any, grace_s: float, *, launcher: bool) -> None:
    """After a restart: stop the job's recorded process if it still runs the job's worker, and is (`launcher=True`)
    or is not (`launcher=False`) a torchrun launcher around it. local and torchrun each stop only their own kind,
    so together they stop every leftover whatever the backend's executor setting is now."""
    pid = row["worker_pid"]
    cmdline = worker_command_line(pid, row["id"]) if pid else None
    if cmdline is not None and (TORCHRUN_MODULE.encode() in cmdline) == launcher:
        stop_leftover(pid, grace_s)


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
