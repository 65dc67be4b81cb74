"""Why a worker says it stopped after a SIGTERM (`backend/jobs/worker.py`, `StopSignal.why`), with real processes: the
kernel's PR_SET_PDEATHSIG can deliver the SIGTERM while a killed backend is still exiting (its other threads are the
worker's parent for a moment), so a parent that leaves within the wait means the backend went away; one that stays
means it is shutting down on purpose."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# The middle process stands for the backend: it starts the "worker", then leaves after `linger` seconds. The worker
# has had its SIGTERM (terminated is set) while its parent is still there, and asks why.
SCRIPT = textwrap.dedent("""
    import os, subprocess, sys, time
    linger = float(sys.argv[1])
    worker = (
        "import os, sys\\n"
        "from synth_ai.backend.jobs.worker import StopSignal\\n"
        "stop = StopSignal(None, 'job', os.getppid())\\n"
        "stop.terminated.set()\\n"
        "print(stop.why(), flush=True)\\n")
    subprocess.Popen([sys.executable, "-c", worker])
    time.sleep(linger)
""")


def ask_worker(linger: float) -> str:
    """Run the backend stand-in with the worker's output on a pipe the worker keeps after its parent leaves."""
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(linger)], stdout=subprocess.PIPE, text=True)
    text, _ = proc.communicate(timeout=60)  # ends when the worker (the last holder of the pipe) exits
    return text.strip()


def test_a_parent_that_leaves_during_the_wait_went_away():
    assert ask_worker(0.3) == "the backend process went away"


def test_a_parent_that_stays_is_shutting_down():
    assert ask_worker(5.0) == "the backend is shutting down"
