"""The task-app side of deploying: finding the entry to deploy, and `deploy --runtime uvicorn` (= `serve`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from synth_ai.taskapp.serving import DEFAULT_PORT


def resolve_entry(app_id: str | None) -> tuple[Any, Path | None]:
    """The `TaskAppEntry` for an id or alias (None: the only app discovered) and the file that registers it; None
    for a verifiers environment with no module of its own (a taskset bundled with verifiers: its choice's path is
    only the taskset's name, not a file to copy)."""
    from synth_ai.taskapp.discovery import find_task_app, load_task_app

    choice = find_task_app(app_id)
    entry = load_task_app(choice)
    if entry.source_path:
        return entry, Path(entry.source_path).resolve()
    return entry, None if choice.kind == "verifiers" else Path(choice.path).resolve()


def serve_with_uvicorn(app_id: str | None, *, host: str, port: int | None, env_files: list[str], reload: bool,
                       force: bool, trace: str | None, trace_db: str | None, out: Any) -> None:
    """`deploy --runtime uvicorn`: the same server as `synth-ai serve`."""
    from synth_ai.connect.env_key_share import share_for_serve
    from synth_ai.taskapp.serving import serve_task_app

    if port is None:
        port = DEFAULT_PORT
        if sys.stdin is not None and sys.stdin.isatty():
            import typer

            port = int(typer.prompt("Port to serve on", default=DEFAULT_PORT))
    serve_task_app(app_id, host=host, port=port, env_files=env_files, reload=reload, force=force,
                   trace_dir=trace, trace_db=trace_db, echo=out.info, share_key=share_for_serve(out.info))
