"""Who holds a TCP port, and freeing it for `serve --force`: only synth-ai's own processes are ever stopped.

`--force` is for the common case of a task app (or backend) of ours left running on the port. A port held by any
other program is refused with the same exit code as without `--force`, and that program is never signalled
(docs/task-apps.md, docs/backend.md).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from synth_ai.errors import ExitCode, SynthError
from synth_ai.ports import any_free_port, port_in_use
from synth_ai.processes import pid_alive

OUR_PROGRAM_NAMES = {"synth-ai", "synth_ai"}  # the console script, and `python -m synth_ai`


class PortInUseError(SynthError):
    exit_code = ExitCode.INVALID_INPUT
    code = "port_in_use"

    def __init__(self, message: str, *, pids: Sequence[int] = (), hint: str | None = None) -> None:
        super().__init__(message, hint=hint, details={"pids": list(pids)})
        self.pids = list(pids)


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A = LISTEN
                continue
            try:
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
            except (IndexError, ValueError):
                continue
            if local_port == port:
                inodes.add(fields[9])
    return inodes


def _pids_holding(inodes: set[str]) -> set[int]:
    targets = {f"socket:[{inode}]" for inode in inodes}
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in targets for fd in (entry / "fd").iterdir()):
                pids.add(int(entry.name))
        except OSError:
            continue
    return pids


def listening_pids(port: int) -> list[int]:
    """Pids of the processes holding a listening TCP socket on `port` (from /proc; `lsof` where /proc is absent).
    Our own pid is never included."""
    pids: set[int] = set()
    if Path("/proc/net/tcp").exists():
        inodes = _listening_inodes(port)
        if inodes:
            pids = _pids_holding(inodes)
    elif shutil.which("lsof"):
        result = subprocess.run(["lsof", "-nP", "-t", f"-iTCP:{port}", "-sTCP:LISTEN"], capture_output=True,
                                text=True, timeout=10, check=False)
        pids.update(int(p) for p in result.stdout.split() if p.strip().isdigit())
    pids.discard(os.getpid())
    return sorted(pids)


def command_line(pid: int) -> list[str]:
    """The process's argv ([] when it cannot be read: gone, or another user's on a system without /proc)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return [part for part in raw.decode(errors="replace").split("\0") if part]
    except OSError:
        pass
    if shutil.which("ps"):
        result = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True,
                                timeout=10, check=False)
        return result.stdout.split()
    return []


def is_synth_ai_process(pid: int) -> bool:
    """A process running synth-ai (the `synth-ai` script or `python -m synth_ai...`) as this user."""
    try:
        if Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}").stat().st_uid != os.getuid():
            return False
    except OSError:
        return False
    argv = command_line(pid)
    program_words = argv[:3]  # the interpreter, then the script or `-m module`: never a later argument
    return any(Path(word).name in OUR_PROGRAM_NAMES or word.split(".")[0] in OUR_PROGRAM_NAMES
               for word in program_words)


def _stop(pids: list[int], host: str, port: int, grace_s: float, echo: Callable[[str], None]) -> None:
    """SIGTERM, then SIGKILL after `grace_s`, until the port is free."""
    echo(f"Stopping the synth-ai processes listening on port {port}: {', '.join(map(str, pids))}")
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            raise PortInUseError(f"Not allowed to stop process {pid} listening on port {port}.", pids=pids,
                                 hint="Stop it yourself or choose another --port.") from exc
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not any(pid_alive(p) for p in pids) and not port_in_use(host, port):
            return
        time.sleep(0.1)
    for pid in pids:
        if pid_alive(pid):
            echo(f"Process {pid} did not stop after SIGTERM; sending SIGKILL")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        if not port_in_use(host, port):
            return
        time.sleep(0.1)
    raise PortInUseError(f"Port {port} is still in use after stopping {', '.join(map(str, pids))}.", pids=pids)


def _another_port(host: str) -> str:
    return f"--port {any_free_port(host)}"


def ensure_port_available(host: str, port: int, *, force: bool, echo: Callable[[str], None] = print,
                          grace_s: float = 5.0) -> None:
    """Nothing to do when `port` is free. Otherwise: with `force`, stop its holders when every one is a synth-ai
    process; in every other case refuse, naming the holders and a free port to use instead."""
    if not port_in_use(host, port):
        return
    pids = listening_pids(port)
    if not pids:
        raise PortInUseError(
            f"Port {port} is in use, but no process listening on it could be found "
            "(it may belong to another user or another network namespace).",
            hint=f"Choose another port, e.g. {_another_port(host)}.")
    foreign = [pid for pid in pids if not is_synth_ai_process(pid)]
    owners = f"(PIDs: {', '.join(map(str, pids))})"
    if foreign:
        raise PortInUseError(
            f"Port {port} appears to be in use {owners} by a program that is not synth-ai.", pids=pids,
            hint=f"Choose another port, e.g. {_another_port(host)}. synth-ai never stops other programs: --force "
                 "stops only synth-ai processes left on the port.")
    if not force:
        raise PortInUseError(
            f"Port {port} appears to be in use {owners} by another synth-ai process.", pids=pids,
            hint=f"Pass --force to stop it, or choose another port, e.g. {_another_port(host)}.")
    _stop(pids, host, port, grace_s, echo)
