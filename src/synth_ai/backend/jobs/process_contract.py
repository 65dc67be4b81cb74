"""What the scheduler and a job's worker process agree on: the worker's exit codes, the variable naming the backend's
pid, and the worker's wish to die with the backend."""

from __future__ import annotations

import ctypes
import signal
import sys

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 75  # EX_TEMPFAIL: stopped because the backend went away; the job stays `running`
PARENT_ENV = "SYNTH_AI_BACKEND_PARENT_PID"


def die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the backend process dies (Linux only; elsewhere the ppid check covers it)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except OSError:
        pass
