"""Running a task app locally under uvicorn: `synth-ai serve`, `task-app serve`, and `deploy --runtime uvicorn`.

`serve_task_app(...)` loads env files, sets up tracing, checks the port (`port_holders`: with `force=True` only
synth-ai's own processes on it are stopped, by pid), makes sure an `ENVIRONMENT_API_KEY` is configured (the one every
command resolves: environment, env files, the key `setup` saved; no prompt unless stdin is a terminal), runs the
`share_key` step it is handed with that key (the CLI hands it `synth_ai.connect.env_key_share`'s upload to the
backend), builds the app and runs uvicorn.

This module is the `serve` command's flow, so it sits in the flows layer although it lives with the task-app SDK
(its documented path). Like the rest of the task-app SDK it never imports the client: reaching a backend is the
caller's step.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from synth_ai.errors import AuthError, InvalidInputError, SynthError
from synth_ai.ports import any_free_port
from synth_ai.taskapp.auth import ENV_KEY, allowed_environment_api_keys, normalize_environment_api_key
from synth_ai.taskapp.port_holders import ensure_port_available

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8001
_RELOAD_APP_ID = "SYNTH_TASKAPP_SERVE_APP_ID"
_RELOAD_APP_PATH = "SYNTH_TASKAPP_SERVE_APP_PATH"


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
    """Make sure the app will accept some key: `ENVIRONMENT_API_KEY` (or a dev fallback / alias), else the one the
    nearest `.env` or `synth-ai setup`'s config.json holds (`synth_ai.env.environment_key`). On a terminal, ask for
    one (kept in this process only); otherwise fail with the fix."""
    from synth_ai.env.environment_key import adopt_environment_key, missing_key_hint

    normalize_environment_api_key(log=False)
    adopt_environment_key()
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
        hint=missing_key_hint(),
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
    share_key: Callable[[str | None], Any] | None = None,
) -> None:
    """Serve a task app (an id or alias, a discovery choice, or a `TaskAppEntry`) until interrupted. `share_key`:
    a step called with the key before the server starts (`synth_ai.connect.env_key_share.share_for_serve`)."""
    from synth_ai.taskapp.tracing import tracing_environment

    if share_key is True:
        raise InvalidInputError("share_key takes the step that shares the key, not True: the task-app SDK does not "
                                "reach a backend itself.",
                                hint="Pass share_key=synth_ai.connect.env_key_share.share_for_serve(print), or leave "
                                     "it out to serve without sharing the key.")
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
    if share_key:  # the backend's RL worker calls this app with this key
        share_key(os.environ.get(ENV_KEY) or (allowed_environment_api_keys() or [None])[0])

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
