"""The task-app SDK: write an environment server that trainers and `eval` call.

    from synth_ai.taskapp import TaskAppConfig, TaskAppEntry, register_task_app, create_task_app

Names are loaded on first use, so importing the contracts does not pull in FastAPI, httpx or uvicorn.
Modules:
- `contracts`  pydantic wire shapes (`TaskInfo`, `RolloutRequest`, `RolloutResponse`, …)
- `config`     `TaskAppConfig`, `TaskAppEntry`, `ModalDeploymentConfig`, the registry
- `server`     `create_task_app(config)` → FastAPI app (routes, auth, error bodies)
- `auth`       the API-key rules (`X-API-Key`, `X-API-Keys`, Bearer; `ENVIRONMENT_API_KEY` + aliases)
- `inference`  calling the policy's OpenAI-compatible `inference_url`
- `vision`     OpenAI multimodal user messages from images
- `discovery`  finding apps by id or alias (AST scan of search roots + bundled examples)
- `serving`    `serve_task_app(...)`: run an app under uvicorn (port checks, `--force`, tracing env)
- `tracing`    recording rollouts in the traces v3 SQLite schema
- `client`     calling a task app: `TaskAppClient` (`RolloutRequest` in, `RolloutAnswer` out)
- `failures`   what a call can end in: `TaskAppTimeout`, `TaskAppUnreachable`, `TaskAppHTTPError`, …
- `verify`     checking a running task app (`check_health`, `check_task_info`, `verify_task_app`)
- `siblings`   `load_sibling(__file__, name)`: import a helper file next to a task app loaded by path
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    # contracts
    "TaskInfo": "contracts", "TaskDescriptor": "contracts", "DatasetInfo": "contracts", "RubricInfo": "contracts",
    "InferenceInfo": "contracts", "LimitsInfo": "contracts", "RolloutEnvSpec": "contracts",
    "RolloutPolicySpec": "contracts", "RolloutRecordConfig": "contracts", "RolloutSafetyConfig": "contracts",
    "RolloutRequest": "contracts", "RolloutStep": "contracts", "RolloutTrajectory": "contracts",
    "RolloutMetrics": "contracts", "RolloutResponse": "contracts", "RolloutMode": "contracts",
    "rl_response_problems": "contracts",
    # config + registry
    "TaskAppConfig": "config", "TaskAppEntry": "config", "ModalDeploymentConfig": "config",
    "ProxyConfig": "config", "RubricBundle": "config", "register_task_app": "config",
    "get_registered": "config", "registered_apps": "config", "unregister_task_app": "config",
    # errors
    "TaskAppError": "errors", "RolloutError": "errors", "InferenceError": "errors",
    "TaskAppNotFoundError": "errors",
    # server + auth
    "create_task_app": "server", "allowed_environment_api_keys": "auth", "normalize_environment_api_key": "auth",
    # inference + vision
    "normalize_inference_url": "inference", "chat_completion": "inference", "tool_calls_of": "inference",
    "with_cid": "inference",
    "VisionSettings": "vision", "png_data_url": "vision", "image_to_png_bytes": "vision",
    "build_user_message": "vision",
    # discovery, serving, tracing, verify
    "discover_task_apps": "discovery", "find_task_app": "discovery", "load_task_app": "discovery",
    "bundled_apps_dir": "discovery", "AppChoice": "discovery",
    "serve_task_app": "serving",
    "TracingSettings": "tracing", "current_trace": "tracing",
    "check_health": "verify", "check_task_info": "verify", "verify_task_app": "verify",
    "HealthReport": "verify", "VerifyReport": "verify",
    # calling a task app
    "TaskAppClient": "client", "RolloutAnswer": "client", "TaskAppAnswer": "client",
    "TaskAppFailure": "failures", "TaskAppTimeout": "failures", "TaskAppUnreachable": "failures",
    "TaskAppTransportError": "failures", "TaskAppHTTPError": "failures", "TaskAppInvalidResponse": "failures",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'synth_ai.taskapp' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"synth_ai.taskapp.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
