"""The task app an eval talks to: discovered and run in this process (an ASGI transport, no port, its lifespan
run), or a running app at `--url` reached over HTTP. Either way every request carries `X-API-Key`."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.errors import AuthError, InvalidInputError

IN_PROCESS_BASE = "http://eval.local"


@dataclass
class TaskAppHandle:
    client: Any  # httpx.AsyncClient, base_url = the app
    app_id: str | None
    where: str  # "in-process (<path>)" or the URL


def environment_key(env_files: Sequence[Path] = ()) -> str | None:
    """The ENVIRONMENT_API_KEY every command resolves alike (environment, the env files the eval loaded, else the
    nearest .env, then the key `setup` saved), set in this process so an app run here accepts it too."""
    from synth_ai.env.environment_key import adopt_environment_key
    from synth_ai.taskapp.auth import normalize_environment_api_key

    normalize_environment_api_key(log=False)
    key = adopt_environment_key(env_files)
    return key.value if key else None


def load_app(app_id: str | None) -> Any:
    """The `TaskAppEntry` for `app_id` (the only discovered app when None)."""
    from synth_ai.errors import SynthError
    from synth_ai.taskapp.discovery import find_task_app, load_task_app

    choice = find_task_app(app_id)
    try:
        return load_task_app(choice)
    except SynthError:
        raise
    except Exception as exc:  # the app's own code failed to import: the user's file, named with the cause
        raise InvalidInputError(f"Cannot load task app '{choice.app_id}' from {choice.path}: "
                                f"{type(exc).__name__}: {exc}",
                                hint="Fix the error in that file (SYNTH_DEBUG=1 shows the traceback).") from exc


async def check_reachable(client: Any, url: str) -> None:
    """One `GET /health` before any rollout: an app that is not there, or refuses the key, stops the run (a
    gateway answering for it does not: the seeds wait for the app, `[eval].task_app_wait_s`)."""
    from synth_ai.errors import NetworkError
    from synth_ai.taskapp.client import TaskAppClient
    from synth_ai.taskapp.failures import TaskAppFailure, TaskAppHTTPError

    try:
        await TaskAppClient(str(client.base_url), http=client).get("/health")
    except TaskAppHTTPError as exc:
        if exc.status_code in (400, 401, 403) and "unauthori" in exc.text.lower():
            raise AuthError(f"The task app at {url} refused ENVIRONMENT_API_KEY (HTTP {exc.status_code}).",
                            hint="Use the key the app was served with (--env-file PATH with "
                                 "ENVIRONMENT_API_KEY=...).") from None
    except TaskAppFailure as exc:
        if getattr(exc, "status_code", None) is None:
            raise NetworkError(f"Cannot reach the task app at {url}: {exc.reason}.",
                               hint="Check --url (is `synth-ai serve` running there?).") from None


@asynccontextmanager
async def open_task_app(*, app_id: str | None, url: str | None, timeout: float, concurrency: int,
                        env_files: Sequence[Path] = ()) -> AsyncIterator[TaskAppHandle]:
    import httpx

    limits = httpx.Limits(max_connections=max(concurrency, 1) + 4, max_keepalive_connections=max(concurrency, 1))
    http_timeout = httpx.Timeout(timeout, connect=min(10.0, timeout))
    if url is not None:
        if not url.startswith(("http://", "https://")):
            raise InvalidInputError(f"--url {url!r} must start with http:// or https://.",
                                    hint="e.g. --url http://127.0.0.1:8001")
        key = environment_key(env_files)
        if not key:
            from synth_ai.env.environment_key import missing_key_hint

            raise AuthError("ENVIRONMENT_API_KEY is not set, so the task app at --url would refuse every request.",
                            hint=missing_key_hint())
        async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=http_timeout,
                                     limits=limits, follow_redirects=False) as client:
            await check_reachable(client, url)
            yield TaskAppHandle(client, app_id, url)
        return
    entry = load_app(app_id)
    from synth_ai.taskapp.server import create_task_app
    from synth_ai.taskapp.serving import load_env_files
    from synth_ai.taskapp.tracing import TracingSettings

    if entry.source_path:
        app_dir = Path(entry.source_path).parent
        load_env_files([p if Path(p).is_absolute() else app_dir / p for p in entry.env_files], required=False)
    minted = None
    if not environment_key(env_files):  # nothing crosses a process boundary: a key for this run only will do
        minted = os.environ["ENVIRONMENT_API_KEY"] = secrets.token_hex(32)
    try:
        # The eval stores the traces itself; the app only returns them.
        app = create_task_app(entry.config_factory(), tracing=TracingSettings.disabled())
        transport = httpx.ASGITransport(app=app)
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=transport, base_url=IN_PROCESS_BASE, timeout=http_timeout,
                                         headers={"X-API-Key": environment_key(env_files) or ""}) as client:
                yield TaskAppHandle(client, entry.app_id, f"in-process ({entry.source_path or entry.app_id})")
    finally:
        if minted is not None and os.environ.get("ENVIRONMENT_API_KEY") == minted:
            del os.environ["ENVIRONMENT_API_KEY"]
