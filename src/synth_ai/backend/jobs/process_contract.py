"""What the scheduler and a job's worker process agree on: the worker's module, its exit codes, the variable naming
the backend's pid, the worker's wish to die with the backend, and how a worker is recognised from outside."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 75  # EX_TEMPFAIL: stopped because the backend went away; the job stays `running`
# the attempt hit a failure a fresh worker gets past (an exception with `resume_in_new_worker`, e.g. a lost vLLM
# engine): the worker's last line says why, and the job resumes from its checkpoint while attempts are left
EXIT_RESUME = 70
PARENT_ENV = "SYNTH_AI_BACKEND_PARENT_PID"
WORKER_MODULE = "synth_ai.backend.jobs.worker"  # `python -m` this, with the job id (or --warm)
_RESUME_LINE = re.compile(r"^worker: attempt \d+ ended: (.+)$")


def resume_line(attempt: int, reason: str) -> str:
    """The last line a worker exiting with EXIT_RESUME writes: why its attempt ended, on one line."""
    return f"worker: attempt {attempt} ended: {one_line(reason)}"


def resume_reason(log_tail: str) -> str | None:
    """The reason in a worker's last line (`resume_line`), or None when the log does not end with one."""
    lines = log_tail.strip().splitlines()
    match = _RESUME_LINE.match(lines[-1]) if lines else None
    return match.group(1) if match else None


def one_line(text: str) -> str:
    """A reason as one sentence fragment: whitespace collapsed, no closing full stop (reasons are joined)."""
    return " ".join(text.split()).rstrip(". ")


def die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the backend process dies (Linux only; elsewhere the ppid check covers it)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def worker_command_line(pid: int, job_id: str) -> list[bytes] | None:
    """The command line of `pid` when it is a live worker process for this job, else None (this guards against pid
    reuse). A warm-started worker has no job id on its command line but works in the job's folder."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if WORKER_MODULE.encode() not in cmdline:
            return None
        if job_id.encode() in cmdline or Path(os.readlink(f"/proc/{pid}/cwd")).name == job_id:
            return cmdline
        return None
    except OSError:
        return None


def is_worker_of(pid: int, job_id: str) -> bool:
    return worker_command_line(pid, job_id) is not None
