"""The task-app entry of a verifiers target: `/task_info` from the environment, `/rollout` running its episode.

`task_app_entry("verifiers:<target>")` is what discovery returns for such an id, so `serve`, `task-app validate`,
`task-app info`, `eval`, `deploy` and `modal-serve` take it like any other app. The environment is loaded once
per process and target (the first `config_factory()` call); its serving resources and the relay live from the
app's start-up to its shutdown, on the app's event loop.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import threading
from pathlib import Path
from typing import Any

from synth_ai.taskapp.config import ModalDeploymentConfig, TaskAppConfig, TaskAppEntry
from synth_ai.taskapp.contracts import (
    DatasetInfo,
    InferenceInfo,
    LimitsInfo,
    RolloutRequest,
    RolloutResponse,
    RubricInfo,
    TaskDescriptor,
    TaskInfo,
)
from synth_ai.taskapp.errors import RolloutError
from synth_ai.taskapp.inference import normalize_inference_url
from synth_ai.taskapp.tracing import current_trace
from synth_ai.verifiers_app import ENV_ARGS_VAR, REQUIREMENT
from synth_ai.verifiers_app.episode import failure, rollout_response
from synth_ai.verifiers_app.target import (
    EnvironmentNotFoundError,
    Target,
    bundled,
    env_args_from_environ,
    resolve_target,
)

DEFAULT_TIMEOUT_S = 600.0
_SAMPLING_KEYS = ("temperature", "top_p", "max_tokens")
_PASSED_THROUGH = ("thinking_mode", "thinking_budget", "seed")  # added to every model call of the rollout
_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str], Any] = {}
UV_REQUIREMENT = "uv>=0.5"  # as the verifiers extra: verifiers runs its chat program with uv


def resolve(app_id: str, module_path: Path | None = None) -> Target:
    """The target of `app_id`; where its id is not installed but `module_path` is there (the copy a Modal image
    carries), that module."""
    try:
        return resolve_target(app_id)
    except EnvironmentNotFoundError:
        if module_path is None or not module_path.exists():
            raise
        local = module_path.parent if module_path.name == "__init__.py" else module_path
        return resolve_target(f"verifiers:{local}")


def module_file(target: Target) -> Path | None:
    """The file that stands for the target on disk (a package's `__init__.py`)."""
    if target.path is not None:
        return target.path / "__init__.py" if target.path.is_dir() else target.path
    if bundled(target.module_name):  # part of verifiers: the image installs it
        return None
    spec = importlib.util.find_spec(target.module_name)
    return Path(spec.origin) if spec is not None and spec.origin else None


def loaded_environment(target: Target, env_args: dict[str, Any]) -> Any:
    from synth_ai.verifiers_app.environment import VerifiersEnvironment

    key = (str(target.path or target.taskset_id), json.dumps(env_args, sort_keys=True, default=str))
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = VerifiersEnvironment(target, env_args)
        return _LOADED[key]


def task_app_entry(app_id: str, module_path: Path | None = None,
                   env_args: dict[str, Any] | None = None) -> TaskAppEntry:
    target = resolve(app_id, module_path)
    args = env_args if env_args is not None else env_args_from_environ()
    path = module_file(target)
    entry = TaskAppEntry(
        app_id=app_id, description=f"verifiers environment {target.spec}",
        config_factory=lambda: build_config(app_id, target, args), modal=_modal_settings(target, args),
    )
    entry.source_path = str(path) if path is not None else None
    return entry


def _modal_settings(target: Target, env_args: dict[str, Any]) -> ModalDeploymentConfig:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", target.module_name).strip("-._") or "env"
    # uv: verifiers runs its chat program as a uv script; without it each new container would fetch uv first
    packages = [REQUIREMENT, UV_REQUIREMENT, *_package_requirements(target)]
    environment = ((ENV_ARGS_VAR, json.dumps(env_args, sort_keys=True)),) if env_args else ()
    return ModalDeploymentConfig(app_name=f"synth-vf-{name}"[:64], pip_packages=tuple(packages),
                                 environment=environment)


def _package_requirements(target: Target) -> list[str]:
    """The installed environment package's own requirements (its code is copied into the image with its
    directory, so a package that is not on the index deploys too)."""
    if target.path is not None or bundled(target.module_name):
        return []
    dists = importlib.metadata.packages_distributions().get(target.module_name) or []
    requires: list[str] = []
    for dist in dists:
        for req in importlib.metadata.requires(dist) or []:
            if "extra ==" not in req and not req.lower().startswith("verifiers"):
                requires.append(req)
    return requires


def build_config(app_id: str, target: Target, env_args: dict[str, Any]) -> TaskAppConfig:
    from synth_ai.verifiers_app.relay import Relay

    environment = loaded_environment(target, env_args)
    relay = Relay()
    described = environment.describe()
    base = TaskInfo(
        task=TaskDescriptor(id=environment.name, name=environment.name, version=described["verifiers_version"],
                            description=f"verifiers environment '{target.spec}' ({described['task_type']})"),
        environment=environment.name,
        dataset=DatasetInfo(id=environment.name, name=environment.name, splits=["train", "eval"],
                            default_split="train", sizes=described["sizes"]),
        rubric=RubricInfo(outcome={"rewards": described["rewards"], "total": "weighted sum of the reward functions"}),
        inference=InferenceInfo(),
        limits=LimitsInfo(max_turns=environment.max_turns),
        uses_tools=environment.uses_tools,
    )

    def describe_taskset() -> dict[str, Any]:
        return described

    def provide_task_instances(seeds: list[int]) -> list[TaskInfo]:
        infos = []
        for seed in seeds:
            task = environment.task_for(int(seed), "train")
            info = base.model_copy(deep=True)
            info.task_metadata = {"seed": seed, "index": task.data.idx, "task_id": task.data.id,
                                  "prompt": task.data.prompt_text[:2000]}
            infos.append(info)
        return infos

    async def rollout(request: RolloutRequest, fastapi_request: Any = None) -> RolloutResponse:
        return await run_rollout(environment, relay, request)

    async def start(app: Any) -> None:
        await relay.start()
        await environment.start()

    async def stop(app: Any) -> None:
        try:
            await environment.stop()
        finally:
            await relay.stop()

    return TaskAppConfig(app_id=app_id, name=f"verifiers: {environment.name}",
                         description=f"The verifiers environment '{target.spec}' served as a task app.",
                         base_task_info=base, describe_taskset=describe_taskset,
                         provide_task_instances=provide_task_instances, rollout=rollout,
                         startup_hooks=(start,), shutdown_hooks=(stop,))


def _seed(request: RolloutRequest) -> int:
    raw = request.env.seed if request.env.seed is not None else (request.env.config or {}).get("seed", 0)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise RolloutError(f"env.seed must be a non-negative integer, not {raw!r}", status_code=400,
                           code="invalid_seed")
    return raw


async def run_rollout(environment: Any, relay: Any, request: RolloutRequest) -> RolloutResponse:
    config = request.policy.config or {}
    if not config.get("inference_url"):
        raise RolloutError("policy.config.inference_url is required (an OpenAI-compatible chat-completions URL)",
                           status_code=400, code="missing_inference_url")
    inference_url = normalize_inference_url(str(config["inference_url"]))
    seed = _seed(request)
    split = environment.split_of(request.mode, (request.env.config or {}).get("split"))
    task = environment.task_for(seed, split)
    sampling = {key: config[key] for key in _SAMPLING_KEYS if config.get(key) is not None}
    sampling.setdefault("temperature", 1.0)
    overrides = {key: config[key] for key in _PASSED_THROUGH if config.get(key) is not None}
    timeout = float(config.get("timeout_s") or DEFAULT_TIMEOUT_S)
    with relay.route(inference_url, overrides=overrides, timeout_s=timeout, recorder=current_trace()) as (url, _):
        episode = await environment.run_episode(task, base_url=url, model=str(config.get("model") or "policy"),
                                                sampling=sampling)
    problem = failure(episode)
    if problem is not None:
        raise problem
    label = task.data.id or task.data.name or f"{split}-{task.data.idx}"
    return rollout_response(episode, run_id=request.run_id, inference_url=inference_url, env_name=environment.name,
                            policy_id=request.policy.policy_name or "policy", task_label=str(label),
                            ops=len(request.ops))
