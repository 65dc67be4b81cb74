"""Running the embedded backend: in the foreground (`serve`), as a background daemon (`start`/`stop`), its
`status`, and how a client on this machine finds it (`find_local_backend`).

One backend per data dir: `serve` holds an exclusive lock on `backend/backend.lock` for its lifetime (released by
the kernel even on SIGKILL), and while it runs `backend/backend.json` says where it listens:
`{"pid", "host", "port", "url", "api_base", "started_at", "data_dir", "key_file"}`.

Ports: a port given as `--port` or `SYNTH_AI_BACKEND_PORT` is taken as given, and a busy one is an error. Without
one the backend takes 8000 (`SYNTH_AI_BACKEND_DEFAULT_PORT`) when it is free and a free port otherwise; the record
above is how every later command finds it. Another program's port is never touched.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from synth_ai.backend.server_settings import BackendSettings, state_paths
from synth_ai.errors import ExitCode, SynthError, UnavailableError
from synth_ai.fsutil import atomic_write_text
from synth_ai.processes import pid_alive

LOCK_FILE = "backend.lock"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class BackendRunningError(SynthError):
    exit_code = ExitCode.INVALID_INPUT
    code = "backend_running"


class PortTakenError(SynthError):
    """The port the user asked for (`--port`, `SYNTH_AI_BACKEND_PORT`) is held by another program."""

    exit_code = ExitCode.INVALID_INPUT
    code = "port_taken"

    def __init__(self, settings: BackendSettings) -> None:
        from synth_ai.env.backend_url import PORT_ENV, default_port, requested_port

        asked = f"{PORT_ENV}={settings.port}" if requested_port() == settings.port else f"--port {settings.port}"
        super().__init__(
            f"Port {settings.port} on {settings.host} is taken by another program; the backend was not started.",
            hint=f"It was asked for by {asked}. Choose a free port, or give none: the backend then takes "
                 f"{default_port()} when it is free and a free port otherwise.",
            details={"host": settings.host, "port": settings.port})


# Foreground ---------------------------------------------------------------------------------------------------
def _acquire_lock(settings: BackendSettings) -> Any:
    settings.ensure_dirs()
    handle = open(settings.root / LOCK_FILE, "a+")  # noqa: SIM115 - held for the server's lifetime
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        state = read_state(settings.data_dir)
        where = f" at {state['url']} (pid {state['pid']})" if state else ""
        raise BackendRunningError(
            f"Another backend is already running on {settings.data_dir}{where}.",
            hint="Stop it with `synth-ai backend stop`, or use another data dir (SYNTH_AI_HOME).") from None
    return handle


def serve(settings: BackendSettings, *, log_level: str = "info",
          on_ready: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Run the backend in this process until SIGINT/SIGTERM (blocking)."""
    import uvicorn

    from synth_ai.backend.api.app import create_app
    from synth_ai.ports import listening_socket

    refuse_unguarded_backend(settings)
    lock = _acquire_lock(settings)
    try:
        # The socket is bound here and handed to uvicorn, so no other program can take the port in between.
        sock = listening_socket(settings.host, settings.port, or_free=not settings.port_fixed)
        if sock is None:
            raise PortTakenError(settings)
        settings.port = sock.getsockname()[1]
        state_file, pid_file, _ = state_paths(settings.data_dir)
        app = create_app(settings)
        config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=log_level, lifespan="on",
                                access_log=log_level == "debug", timeout_graceful_shutdown=5)
        server = uvicorn.Server(config)
        original_startup = server.startup

        async def startup(sockets=None) -> None:  # write the state file once the socket is listening
            await original_startup(sockets=sockets)
            if server.started:
                state = _state_doc(settings)
                atomic_write_text(state_file, json.dumps(state, indent=2) + "\n", mode=0o600)
                atomic_write_text(pid_file, f"{os.getpid()}\n", mode=0o600)
                if on_ready is not None:
                    on_ready(state)

        server.startup = startup  # type: ignore[method-assign]
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()
            for path in (state_file, pid_file):
                _remove_if_ours(path)
        if not server.started:
            raise UnavailableError(f"The backend could not start on {settings.host}:{settings.port}; see the log above.")
    finally:
        lock.close()


def _state_doc(settings: BackendSettings) -> dict[str, Any]:
    from synth_ai.backend.store.db import utcnow
    from synth_ai.env.backend_keys import keys_path

    return {"pid": os.getpid(), "host": settings.host, "port": settings.port, "url": settings.url,
            "api_base": f"{settings.url}/api", "started_at": utcnow(), "data_dir": str(settings.data_dir),
            "key_file": str(keys_path(settings.data_dir))}


def _remove_if_ours(path: Path) -> None:
    try:
        text = path.read_text()
    except OSError:
        return
    try:
        pid = json.loads(text).get("pid") if path.suffix == ".json" else int(text.strip())
    except (ValueError, AttributeError):
        pid = None
    if pid == os.getpid():
        path.unlink(missing_ok=True)


# State and status ---------------------------------------------------------------------------------------------
def read_state(data_dir: Path) -> dict[str, Any] | None:
    from synth_ai.env.backend_record import read_record

    return read_record(data_dir)


def _healthy(url: str, timeout: float = 2.0) -> bool:
    import httpx

    try:
        response = httpx.get(f"{url}/health", timeout=timeout)
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and response.json().get("service") == "synth-ai-backend"


def status(data_dir: Path) -> dict[str, Any]:
    """Whether a backend runs on this data dir, where, and whether it answers."""
    from synth_ai.env.backend_keys import keys_path

    _, _, log_file = state_paths(data_dir)
    state = read_state(data_dir)
    doc: dict[str, Any] = {"running": False, "healthy": False, "pid": None, "url": None, "api_base": None,
                           "data_dir": str(data_dir), "key_file": str(keys_path(data_dir)), "log_file": str(log_file)}
    if state is None or not pid_alive(state["pid"]):
        return doc
    doc.update({k: state.get(k) for k in ("pid", "url", "api_base", "host", "port", "started_at")})
    doc["running"] = True
    doc["healthy"] = bool(state.get("url")) and _healthy(state["url"])
    return doc


def find_local_backend(data_dir: Path | None = None) -> dict[str, Any] | None:
    """`{url, api_base, api_key}` of the backend running on this machine's data dir, or None when none runs.

    This is how a client uses the embedded backend without configuration: the URL from `backend/backend.json`
    (checked live), the key from `backend_keys.json`.
    """
    from synth_ai.env.backend_keys import default_key
    from synth_ai.env.paths import data_dir as default_data_dir

    root = Path(data_dir) if data_dir is not None else default_data_dir(create=False)
    info = status(root)
    if not info["running"]:
        return None
    return {"url": info["url"], "api_base": info["api_base"], "api_key": default_key(root), "pid": info["pid"]}


def refuse_unguarded_backend(settings: BackendSettings) -> None:
    """On loopback the first start creates the backend's key; on any other address a key must exist already, so
    the backend is never reachable from other machines before someone holds a key for it."""
    from synth_ai.env.backend_keys import accepted_keys, keys_path
    from synth_ai.env.exposure import refuse_unguarded

    refuse_unguarded(settings.host, settings.port, "the backend", guarded=bool(accepted_keys(settings.data_dir)),
                     fix=f"Create its key first: `synth-ai setup --local` (or one start on 127.0.0.1) writes it to "
                         f"{keys_path(settings.data_dir)}; give that key to its clients.")


# Daemon -------------------------------------------------------------------------------------------------------
def start(settings: BackendSettings, *, timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
    """Start `synth-ai backend serve` in the background; returns its status once it answers /health."""
    from synth_ai.ports import port_in_use

    current = status(settings.data_dir)
    if current["running"]:
        return {**current, "already_running": True}
    refuse_unguarded_backend(settings)
    if settings.port_fixed and port_in_use(settings.host, settings.port):
        raise PortTakenError(settings)
    settings.ensure_dirs()
    _, _, log_file = state_paths(settings.data_dir)
    env = dict(os.environ)
    env["SYNTH_AI_HOME"] = str(settings.data_dir)
    cmd = [sys.executable, "-m", "synth_ai", "backend", "serve", "--host", settings.host, "--executor",
           settings.executor]
    if settings.port_fixed:  # otherwise the server picks: the default port when free, else a free one
        cmd += ["--port", str(settings.port)]
    for path in settings.traces:  # absolute already: the dashboard's trace databases as this command resolved them
        cmd += ["--traces", str(path)]
    with open(log_file, "ab") as log:
        log.write(f"\n=== synth-ai backend start ({time.strftime('%Y-%m-%d %H:%M:%S')}) ===\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, close_fds=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise UnavailableError(f"The backend exited during start-up (exit code {code}).",
                                   hint=f"See the log: {log_file}\n{_tail(log_file)}")
        state = read_state(settings.data_dir)
        if state is not None and state.get("pid") == proc.pid and _healthy(state["url"], timeout=1.0):
            doc = {**status(settings.data_dir), "already_running": False}
            if state.get("port") != settings.port:  # the default port was taken: say where it went instead
                doc["port_taken"] = settings.port
            return doc
        time.sleep(0.2)
    raise UnavailableError(f"The backend did not answer within {timeout:.0f}s (pid {proc.pid}).",
                           hint=f"See the log: {log_file}; stop it with `synth-ai backend stop`.")


def moved_notice(state: dict[str, Any]) -> str:
    """What to say when `start` found the default port taken (`port_taken`): where the backend went instead."""
    return (f"Port {state['port_taken']} is taken by another program; the embedded backend listens on "
            f"{state['url']} instead (recorded in {state['data_dir']}/backend/backend.json, where every later "
            "command finds it).")


def stop(data_dir: Path, *, timeout: float = STOP_TIMEOUT_S) -> dict[str, Any]:
    """SIGTERM the running backend (it stops its workers; their jobs resume at the next start), SIGKILL on timeout."""
    state = read_state(data_dir)
    if state is None or not pid_alive(state["pid"]):
        state_file, pid_file, _ = state_paths(data_dir)
        for path in (state_file, pid_file):
            path.unlink(missing_ok=True)
        return {"stopped": False, "was_running": False, "pid": None}
    pid = state["pid"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return {"stopped": True, "was_running": True, "pid": pid, "forced": False}
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        if not pid_alive(pid):
            break
        time.sleep(0.1)
    return {"stopped": True, "was_running": True, "pid": pid, "forced": True}


def _tail(path: Path, limit: int = 1500) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode("utf-8", "replace")
