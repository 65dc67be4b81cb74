"""`synth_ai.processes.pid_alive` with real child processes: running, exited but not reaped (a zombie), reaped."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from synth_ai.processes import pid_alive


def test_a_running_process_is_alive() -> None:
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_zombie_and_a_reaped_process_are_not_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # wait until it has exited without reaping it (Popen.poll would reap): a zombie until we wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and pid_alive(child.pid):
        time.sleep(0.05)
    assert not pid_alive(child.pid), "an exited child that was not reaped yet is a zombie, not running"
    child.wait()
    assert not pid_alive(child.pid)
