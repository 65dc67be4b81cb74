"""What runs inside the Modal container (and under `.local()`): load the task app, return its ASGI app.

The generated Modal app calls `task_app_asgi(app_id, module_path)` from its `@modal.asgi_app()` function. It
imports the module that registers the app (mounted from the app's directory) and builds the same FastAPI app
`synth-ai serve` would: routes, auth and tracing are the SDK's, configured by the container's environment (the
Modal secrets). Without a module (`None`: an app the image installs, such as a taskset bundled with verifiers) the
app id alone finds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def task_app_asgi(app_id: str, module_path: str | None) -> Any:
    from synth_ai.taskapp.discovery import AppChoice, load_task_app
    from synth_ai.taskapp.server import create_task_app

    entry = load_task_app(AppChoice(app_id, Path(module_path)) if module_path else app_id)
    return create_task_app(entry.config_factory())
