"""Whether a process is still running, the one way every part of synth-ai asks it."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while `pid` runs. A process owned by another user counts as running (we may not signal it); a zombie
    (exited, not yet reaped by its parent) does not: it no longer holds a port or does any work."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): the signal's answer stands
