"""A loaded verifiers environment: its tasks per split, what `/task_info` says of it, and its serving resources.

The environment is verifiers' `SingleAgentEnv` over the target's taskset, played by the built-in `null` harness
(verifiers' own chat loop, with the taskset's tools) in the `subprocess` runtime: no container, no sandbox
service, no tunnel. Tasks are read once, at load; a seed picks task `seed % len(tasks)` of its split.

Splits: v1 tasksets have none of their own; many take a `split` config field. When the taskset's config has one,
the eval split is the same taskset loaded with `split = "test"` (or the `eval` table of the env args); otherwise
both splits are the same tasks.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any

from synth_ai.errors import InvalidInputError, NetworkError
from synth_ai.verifiers_app.target import Target, require_verifiers

log = logging.getLogger("synth_ai.verifiers_app")

MAX_TASKS = 10_000  # an infinite taskset is read this far
RESERVED_ARGS = ("agent", "eval")  # env args that are not taskset fields
_NETWORK_MARKERS = ("offline", "connectionerror", "couldn't reach", "could not reach", "name or service not known",
                    "temporary failure in name resolution", "max retries exceeded", "connecterror",
                    "localentrynotfounderror", "failed to resolve")
_DATASET_ID = re.compile(r"['\"]?([A-Za-z0-9][\w.-]*/[\w.-]+)['\"]?")


class EnvironmentLoadError(InvalidInputError):
    code = "verifiers_environment_failed"


class DatasetOfflineError(NetworkError):
    code = "verifiers_dataset_offline"


class VerifiersEnvironment:
    def __init__(self, target: Target, env_args: dict[str, Any] | None = None) -> None:
        self.target = target
        self.env_args = dict(env_args or {})
        self.env = _load_environment(target, self.env_args)
        self.splits: dict[str, list[Any]] = {"train": _read_tasks(self.env.taskset, target)}
        self.splits["eval"] = self._eval_tasks()
        self._stack: contextlib.AsyncExitStack | None = None

    # --- tasks -------------------------------------------------------------------------------------------------

    def _eval_tasks(self) -> list[Any]:
        from verifiers.v1.utils.loaders import load_taskset

        taskset = self.env.taskset
        overrides = self.env_args.get("eval")
        if overrides is None:
            if "split" not in type(taskset.config).model_fields or getattr(taskset.config, "split", None) == "test":
                return self.splits["train"]
            overrides = {"split": "test"}
        if not isinstance(overrides, dict):
            raise InvalidInputError(f"env args 'eval' must be an object of taskset fields, not {overrides!r}.",
                                    hint='e.g. {"eval": {"split": "validation"}}')
        config = _validated(lambda: type(taskset.config).model_validate(
            {**taskset.config.model_dump(), **overrides}), self.target, prefix="eval.")
        try:
            return _read_tasks(_constructed(lambda: load_taskset(config), self.target), self.target)
        except EnvironmentLoadError as exc:
            if "eval" in self.env_args:
                raise
            log.warning("verifiers environment %s: no 'test' split (%s); eval seeds use the train tasks",
                        self.target.spec, exc.message)
            return self.splits["train"]

    def split_of(self, mode: str | None, requested: Any = None) -> str:
        if isinstance(requested, str) and requested in self.splits:  # anything else (a list, a number) is ignored
            return requested
        return "eval" if mode == "eval" else "train"

    def task_for(self, seed: int, split: str) -> Any:
        tasks = self.splits[split]
        return tasks[seed % len(tasks)]

    # --- description -------------------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.target.module_name

    @property
    def uses_tools(self) -> bool:
        taskset = self.env.taskset
        task_cls = type(taskset).task_type()
        return bool(type(taskset).toolsets(taskset.config) or task_cls.toolsets(taskset.config.task))

    @property
    def max_turns(self) -> int | None:
        return getattr(self.env.config.agent, "max_turns", None)

    def reward_names(self) -> list[str]:
        tasks = self.splits["train"]
        return [fn.__name__ for fn in tasks[0].hooks("reward")] if tasks else []

    def describe(self) -> dict[str, Any]:
        import verifiers

        return {
            "id": self.name, "name": self.name, "source": "verifiers", "verifiers_version": verifiers.__version__,
            "target": self.target.spec, "splits": ["train", "eval"], "default_split": "train",
            "sizes": {split: len(tasks) for split, tasks in self.splits.items()},
            "uses_tools": self.uses_tools, "max_turns": self.max_turns, "rewards": self.reward_names(),
            "task_type": type(self.env.taskset).task_type().__name__, "env_args": self.env_args,
        }

    # --- serving -----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Hold verifiers' serving resources (shared tool servers, the interception pool) until `stop`."""
        if self._stack is not None:
            return
        _uv_on_path()
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(self.env.serving())
        self._stack = stack

    async def stop(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def run_episode(self, task: Any, *, base_url: str, model: str, sampling: dict[str, Any]) -> Any:
        vf = require_verifiers()
        from verifiers.v1.types import SamplingConfig

        if self._stack is None:
            await self.start()
        ctx = vf.ModelContext(client=vf.EvalClientConfig(base_url=base_url), model=model,
                              sampling=SamplingConfig(**sampling))
        return await self.env.run_episode(task, ctx)


def _uv_on_path() -> None:
    """verifiers runs its chat program with `uv` (found on PATH, else installed with pip or curl): the one installed
    beside this interpreter (the `verifiers` extra brings it) comes first when PATH has none."""
    import os
    import shutil
    import sys
    from pathlib import Path

    beside = Path(sys.executable).parent
    if shutil.which("uv") is None and (beside / "uv").exists():
        os.environ["PATH"] = os.pathsep.join([str(beside), os.environ.get("PATH", "")])


def _load_environment(target: Target, env_args: dict[str, Any]) -> Any:
    require_verifiers()
    from verifiers.v1.utils.loaders import load_environment, resolve_env_config

    taskset = {k: v for k, v in env_args.items() if k not in RESERVED_ARGS}
    agent = env_args.get("agent") or {}
    if not isinstance(agent, dict):
        raise InvalidInputError(f"env args 'agent' must be an object, not {agent!r}.", hint='e.g. {"agent": '
                                '{"max_turns": 4}}')
    raw = {"taskset": {**taskset, "id": target.taskset_id},
           "agent": {**agent, "harness": {"id": "null"}, "runtime": {"type": "subprocess"}}}
    config = _validated(lambda: resolve_env_config(raw), target)
    return _constructed(lambda: load_environment(config), target)


def _validated(build: Any, target: Target, prefix: str = "") -> Any:
    from pydantic import ValidationError

    try:
        return build()
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            path = ".".join(str(p) for p in error.get("loc", ()) if p != "taskset")
            found = error.get("input")
            problems.append(f"{prefix}{path or '(root)'}: {error.get('msg')} (found {found!r})")
        raise InvalidInputError(
            f"The env args for verifiers environment '{target.spec}' do not fit its config: " + "; ".join(problems),
            hint="Pass the taskset's own config fields with --env-args (or SYNTH_VERIFIERS_ENV_ARGS); "
                 "'agent' holds agent fields such as max_turns.") from exc
    except Exception as exc:  # the taskset's module failed while its config was resolved (import, bad export)
        raise _load_failure(exc, target) from exc


def _constructed(build: Any, target: Target) -> Any:
    try:
        return build()
    except Exception as exc:
        raise _load_failure(exc, target) from exc


def _read_tasks(taskset: Any, target: Target) -> list[Any]:
    view = taskset if taskset.bounded else taskset.take(MAX_TASKS)
    try:
        tasks = list(view)
    except Exception as exc:
        raise _load_failure(exc, target) from exc
    if not tasks:
        raise EnvironmentLoadError(f"The taskset of verifiers environment '{target.spec}' has no tasks.",
                                   hint="Check its load() and the env args that select rows.")
    return tasks


def _load_failure(exc: Exception, target: Target) -> Exception:
    text = f"{type(exc).__name__}: {exc}"
    lowered = text.lower()
    if isinstance(exc, (ConnectionError, TimeoutError)) or any(m in lowered for m in _NETWORK_MARKERS):
        match = _DATASET_ID.search(str(exc))
        dataset = f"dataset '{match.group(1)}'" if match else "its dataset"
        return DatasetOfflineError(
            f"Verifiers environment '{target.spec}' needs {dataset} from the network, which is not reachable "
            f"here ({text[:300]}).",
            hint="Download it once on a machine that is online (the datasets/Hugging Face cache, HF_HOME) and copy "
                 "the cache here, or serve where the network is reachable. HF_DATASETS_OFFLINE=1 and "
                 "HF_HUB_OFFLINE=1 must be unset to download.")
    where = f" ({target.path})" if target.path else ""
    return EnvironmentLoadError(
        f"Loading verifiers environment '{target.spec}'{where} failed: {text[:500]}",
        hint="Fix the environment's code or its env args. SYNTH_DEBUG=1 shows the traceback.")
