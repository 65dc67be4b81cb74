"""How a task app is described (`TaskAppConfig`), registered (`TaskAppEntry`, `register_task_app`) and deployed
to Modal (`ModalDeploymentConfig`).

A task-app module builds a `TaskAppConfig` in a zero-argument factory and registers it:

    register_task_app(entry=TaskAppEntry(app_id="math-single-step", description="…",
                                         config_factory=build_config, aliases=("math",),
                                         modal=ModalDeploymentConfig(app_name="synth-math")))

`create_task_app(config)` (in `synth_ai.taskapp.server`) turns a config into a FastAPI app. The field names follow
synth-ai 0.2.17 so apps written for it port by changing imports. This module imports no web framework.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from synth_ai.taskapp.contracts import RolloutRequest, RolloutResponse, TaskInfo

# Callables may be sync or async; the server awaits whatever they return when it is awaitable.
DescribeTaskset = Callable[[], "dict[str, Any] | Awaitable[dict[str, Any]]"]
ProvideInstances = Callable[[Sequence[int]], "Iterable[TaskInfo] | Awaitable[Iterable[TaskInfo]]"]
RolloutExecutor = Callable[[RolloutRequest, Any], "RolloutResponse | dict[str, Any] | Awaitable[Any]"]
Hook = Callable[[Any], "None | Awaitable[None]"]


@dataclass
class RubricBundle:
    """Optional rubrics shown by `/info` (outcome- and event-level)."""

    outcome: Any = None
    events: Any = None


@dataclass
class ProxyConfig:
    """Optional vendor proxies: `/proxy/v1/chat/completions` (OpenAI) and `/proxy/groq/v1/chat/completions`."""

    enable_openai: bool = False
    enable_groq: bool = False
    system_hint: str | None = None
    openai_url: str = "https://api.openai.com/v1/chat/completions"
    groq_url: str = "https://api.groq.com/openai/v1/chat/completions"


@dataclass
class TaskAppConfig:
    app_id: str
    name: str
    description: str
    base_task_info: TaskInfo
    describe_taskset: DescribeTaskset
    provide_task_instances: ProvideInstances
    rollout: RolloutExecutor
    dataset_registry: Any = None
    rubrics: RubricBundle = field(default_factory=RubricBundle)
    proxy: ProxyConfig | None = None
    routers: Sequence[Any] = ()
    middleware: Sequence[Any] = ()  # accepted for compatibility; ignored, as in the reference
    app_state: dict[str, Any] = field(default_factory=dict)
    require_api_key: bool = True
    expose_debug_env: bool = True
    cors_origins: Sequence[str] | None = None
    startup_hooks: Sequence[Hook] = ()
    shutdown_hooks: Sequence[Hook] = ()

    def __post_init__(self) -> None:
        if not self.app_id or not isinstance(self.app_id, str):
            raise ValueError("TaskAppConfig.app_id must be a non-empty string")
        if isinstance(self.base_task_info, dict):
            self.base_task_info = TaskInfo.model_validate(self.base_task_info)


@dataclass(frozen=True)
class ModalDeploymentConfig:
    """How `synth-ai deploy` builds the Modal app for an entry (fields and defaults as synth-ai 0.2.17)."""

    app_name: str
    python_version: str = "3.11"
    pip_packages: Sequence[str] = ()
    apt_packages: Sequence[str] = ()
    extra_local_dirs: Sequence[tuple[str, str]] = ()  # (local path, path in the container)
    secret_names: Sequence[str] = ()
    volume_mounts: Sequence[tuple[str, str]] = ()  # (volume name, mount path)
    timeout: int = 600
    memory: int = 4096
    cpu: float = 2.0
    min_containers: int = 1
    max_containers: int = 4
    # (name, value) pairs set in the container before the app loads (not secrets: they are written into the
    # generated Modal script; secrets go through secret_names or env files)
    environment: Sequence[tuple[str, str]] = ()


@dataclass
class TaskAppEntry:
    app_id: str
    description: str
    config_factory: Callable[[], TaskAppConfig]
    aliases: Sequence[str] = ()
    env_files: Sequence[str] = ()
    modal: ModalDeploymentConfig | None = None
    # Where the entry was registered from (filled in by discovery when it imports the module).
    source_path: str | None = None

    def names(self) -> tuple[str, ...]:
        return (self.app_id, *self.aliases)


# --- registry ---------------------------------------------------------------------------------------------------

_REGISTRY: dict[str, TaskAppEntry] = {}
_LOCK = threading.Lock()


def register_task_app(*, entry: TaskAppEntry) -> TaskAppEntry:
    """Register an entry under its id and aliases. Registering the same id again replaces the old entry (a module
    imported twice re-registers itself); an id or alias already taken by another app is an error."""
    with _LOCK:
        for name in entry.names():
            owner = _owner_of(name)
            if owner is not None and owner.app_id != entry.app_id:
                raise ValueError(
                    f"Task app name {name!r} of {entry.app_id!r} is already used by {owner.app_id!r}"
                )
        _REGISTRY[entry.app_id] = entry
    return entry


def unregister_task_app(app_id: str) -> None:
    with _LOCK:
        _REGISTRY.pop(app_id, None)


def _owner_of(name: str) -> TaskAppEntry | None:
    if name in _REGISTRY:
        return _REGISTRY[name]
    for entry in _REGISTRY.values():
        if name in entry.aliases:
            return entry
    return None


def get_registered(app_id: str) -> TaskAppEntry | None:
    """The registered entry whose id or alias is `app_id`, or None."""
    with _LOCK:
        return _owner_of(app_id)


def registered_apps() -> list[TaskAppEntry]:
    with _LOCK:
        return sorted(_REGISTRY.values(), key=lambda e: e.app_id)


__all__ = [
    "ModalDeploymentConfig",
    "ProxyConfig",
    "RubricBundle",
    "TaskAppConfig",
    "TaskAppEntry",
    "get_registered",
    "register_task_app",
    "registered_apps",
    "unregister_task_app",
]
