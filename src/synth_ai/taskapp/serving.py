"""Running a task app locally under uvicorn: `synth-ai serve`, `task-app serve`, and `deploy --runtime uvicorn`.

`serve_task_app(...)` loads env files, sets up tracing, checks the port (freeing it with `force=True` by stopping
only the processes listening on it, by pid), makes sure an `ENVIRONMENT_API_KEY` is configured (no prompt unless
stdin is a terminal), shares that key, sealed, with the backend `train` would use when one is configured or the
embedded one runs here (`client/env_keys.py`; failures only warn), builds the app and runs uvicorn.

This module is the `serve` command's flow, so it sits in the flows layer although it lives with the task-app SDK
(its documented path): it may use the client to share the key (docs/architecture.md).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from synth_ai.errors import AuthError, ExitCode, InvalidInputError, SynthError
from synth_ai.ports import any_free_port, port_in_use
from synth_ai.processes import pid_alive
from synth_ai.taskapp.auth import ENV_KEY, allowed_environment_api_keys, normalize_environment_api_key

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8001
_RELOAD_APP_ID = "SYNTH_TASKAPP_SERVE_APP_ID"
_RELOAD_APP_PATH = "SYNTH_TASKAPP_SERVE_APP_PATH"


class PortInUseError(SynthError):
    exit_code = ExitCode.INVALID_INPUT
    code = "port_in_use"

    def __init__(self, message: str, *, pids: Sequence[int] = (), hint: str | None = None) -> None:
        super().__init__(message, hint=hint, details={"pids": list(pids)})
        self.pids = list(pids)


# --- ports ------------------------------------------------------------------------------------------------------


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


def listening_pids(port: int) -> list[int]:
    """Pids of the processes holding a listening TCP socket on `port` (from /proc; `lsof` where /proc is absent).
    Our own pid is never included."""
    pids: set[int] = set()
    if Path("/proc/net/tcp").exists():
        inodes = _listening_inodes(port)
        if inodes:
            targets = {f"socket:[{inode}]" for inode in inodes}
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    for fd in (entry / "fd").iterdir():
                        try:
                            if os.readlink(fd) in targets:
                                pids.add(int(entry.name))
                                break
                        except OSError:
                            continue
                except OSError:
                    continue
    elif shutil.which("lsof"):
        result = subprocess.run(["lsof", "-nP", "-t", f"-iTCP:{port}", "-sTCP:LISTEN"], capture_output=True,
                                text=True, timeout=10, check=False)
        pids.update(int(p) for p in result.stdout.split() if p.strip().isdigit())
    pids.discard(os.getpid())
    return sorted(pids)


def free_port(host: str, port: int, *, grace_s: float = 5.0, echo: Callable[[str], None] = print) -> list[int]:
    """Stop the processes listening on `port`: SIGTERM, then SIGKILL after `grace_s`. Returns the pids stopped."""
    pids = listening_pids(port)
    if not pids:
        if port_in_use(host, port):
            raise PortInUseError(
                f"Port {port} is in use, but no process listening on it could be found "
                "(it may belong to another user or another network namespace).",
                hint="Stop that process yourself or choose another --port.",
            )
        return []
    echo(f"Stopping the processes listening on port {port}: {', '.join(map(str, pids))}")
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
            return pids
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
            return pids
        time.sleep(0.1)
    raise PortInUseError(f"Port {port} is still in use after stopping {', '.join(map(str, pids))}.", pids=pids)


def ensure_port_available(host: str, port: int, *, force: bool, echo: Callable[[str], None] = print) -> None:
    if not port_in_use(host, port):
        return
    if force:
        free_port(host, port, echo=echo)
        return
    pids = listening_pids(port)
    owners = f" (PIDs: {', '.join(map(str, pids))})" if pids else ""
    raise PortInUseError(
        f"Port {port} appears to be in use{owners}.", pids=pids,
        hint="Pass --force to stop the processes listening on it, or choose another --port.",
    )


# --- environment ------------------------------------------------------------------------------------------------


def load_env_files(paths: Iterable[str | os.PathLike[str]], *, required: bool = True,
                   echo: Callable[[str], None] | None = None) -> list[Path]:
    """Load `.env` files without overriding variables already set (`synth_ai.env.dotenv_files`). With
    `required=False`, missing files are skipped (an entry's optional env files)."""
    from synth_ai.env import dotenv_files

    existing = [p for p in paths if required or Path(p).expanduser().is_file()]
    loaded = dotenv_files.load_env_files(existing)
    if loaded and echo is not None:
        echo(f"[task:server] Loaded environment from: {', '.join(map(str, loaded))}")
    return loaded


def require_environment_api_key(*, interactive: bool | None = None) -> None:
    """Make sure the app will accept some key: `ENVIRONMENT_API_KEY` (or a dev fallback / alias). On a terminal,
    ask for one (kept in this process only); otherwise fail with the fix."""
    normalize_environment_api_key(log=False)
    if allowed_environment_api_keys():
        return
    if interactive is None:
        interactive = sys.stdin is not None and sys.stdin.isatty()
    if interactive:
        import getpass

        value = getpass.getpass("ENVIRONMENT_API_KEY for this task app (input hidden): ").strip()
        if value:
            os.environ[ENV_KEY] = value
            return
    raise AuthError(
        f"{ENV_KEY} is not set, so the task app would refuse every request.",
        hint="Run `synth-ai setup --local` to create one, or pass --env-file PATH with ENVIRONMENT_API_KEY=... .",
    )


# --- serve ------------------------------------------------------------------------------------------------------


def resolve_entry(app: Any) -> Any:
    """A `TaskAppEntry` from an entry, a discovery choice, or an app id/alias (None: the only app found)."""
    from synth_ai.taskapp.config import TaskAppEntry
    from synth_ai.taskapp.discovery import AppChoice, find_task_app, load_task_app

    if isinstance(app, TaskAppEntry):
        return app
    if isinstance(app, AppChoice):
        return load_task_app(app)
    return load_task_app(find_task_app(app))


def serve_task_app(
    app: Any = None,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    env_files: Sequence[str | os.PathLike[str]] = (),
    reload: bool = False,
    force: bool = False,
    trace_dir: str | os.PathLike[str] | None = None,
    trace_db: str | os.PathLike[str] | None = None,
    echo: Callable[[str], None] = print,
    interactive: bool | None = None,
    log_level: str = "info",
    share_key: bool = True,
) -> None:
    """Serve a task app (an id or alias, a discovery choice, or a `TaskAppEntry`) until interrupted."""
    from synth_ai.taskapp.tracing import tracing_environment

    if not 1 <= int(port) <= 65535:
        raise InvalidInputError(f"--port must be between 1 and 65535, not {port}")
    load_env_files(env_files, echo=echo)
    tracing_env = tracing_environment(trace_dir, trace_db)
    if tracing_env:
        os.environ.update(tracing_env)
        if "TASKAPP_SFT_OUTPUT_DIR" in tracing_env:
            Path(tracing_env["TASKAPP_SFT_OUTPUT_DIR"]).mkdir(parents=True, exist_ok=True)
            echo(f"Tracing enabled. SFT JSONL will be written to {tracing_env['TASKAPP_SFT_OUTPUT_DIR']}")
        echo(f"Tracing DB path set to {tracing_env['SQLD_DB_PATH']}")
    entry = resolve_entry(app)
    app_dir = Path(entry.source_path).parent if entry.source_path else Path.cwd()
    load_env_files([p if Path(p).is_absolute() else app_dir / p for p in entry.env_files], required=False,
                   echo=echo)
    cwd_env = Path.cwd() / ".env"
    if cwd_env.is_file():
        load_env_files([cwd_env], required=False)
    ensure_port_available(host, port, force=force, echo=echo)
    require_environment_api_key(interactive=interactive)
    _refuse_unguarded_app(entry, host, port)
    if share_key:
        from synth_ai.client.env_keys import share_environment_key

        # The backend's RL worker calls this app with this key; a failure only warns, as in 0.2.17's serve.
        result = share_environment_key(os.environ.get(ENV_KEY) or (allowed_environment_api_keys() or [None])[0],
                                       say=echo, warn=lambda m: echo(f"[WARN] {m}"))
        if result.status == "skipped":
            echo(f"[preflight] {result.message}")

    import uvicorn

    if reload:
        if not entry.source_path:
            raise InvalidInputError("--reload needs an app loaded from a file (its directory is watched).")
        os.environ[_RELOAD_APP_ID] = entry.app_id
        os.environ[_RELOAD_APP_PATH] = str(entry.source_path)
        echo(f"[task:server] Starting '{entry.app_id}' on {host}:{port}")
        uvicorn.run("synth_ai.taskapp.serving:reload_app_factory", factory=True, host=host, port=port,
                    reload=True, reload_dirs=[str(app_dir)], log_level=log_level)
        return
    from synth_ai.taskapp.server import create_task_app

    app = create_task_app(entry.config_factory())  # first: an app that fails to load says so before "Starting"
    echo(f"[task:server] Starting '{entry.app_id}' on {host}:{port}")
    uvicorn.run(app, host=host, port=port, log_level=log_level, reload=False)


def _refuse_unguarded_app(entry: Any, host: str, port: int) -> None:
    """A task app whose config turns key checks off may run on loopback only (see `synth_ai.env.exposure`)."""
    from synth_ai.env.exposure import is_loopback, refuse_unguarded

    if is_loopback(host):
        return
    config = entry.config_factory()
    refuse_unguarded(host, port, f"task app '{entry.app_id}'", guarded=bool(config.require_api_key),
                     fix="Its TaskAppConfig sets require_api_key=False: set it to True (the default) so "
                         "ENVIRONMENT_API_KEY guards every route.")


def reload_app_factory() -> Any:
    """The app factory uvicorn's reloader imports in its worker process (`--reload`)."""
    from synth_ai.taskapp.discovery import AppChoice, load_task_app
    from synth_ai.taskapp.server import create_task_app

    app_id = os.environ[_RELOAD_APP_ID]
    entry = load_task_app(AppChoice(app_id, Path(os.environ[_RELOAD_APP_PATH])))
    return create_task_app(entry.config_factory())


@contextmanager
def running_in_background(app: Any, *, host: str = DEFAULT_HOST, port: int = 0,
                          startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Run an ASGI app under uvicorn in a background thread; yields its base URL (port 0: a free port)."""
    import threading

    import uvicorn

    if port == 0:
        port = any_free_port(host)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name=f"task-app-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise SynthError(f"The task app did not start on {host}:{port}.")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
