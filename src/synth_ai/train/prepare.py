"""Everything `train` does before the first network call: pick the config, load env files, validate, resolve
the backend and plan the requests. `--dry-run` stops here and prints the plan."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from synth_ai.client.connect import api_key_for
from synth_ai.config.common import ResolveContext
from synth_ai.config.discovery import discover_configs
from synth_ai.config.kinds import infer_training_kind
from synth_ai.config.loaded import LoadedConfig
from synth_ai.config.loader import load_config
from synth_ai.config.toml_source import display_path, load_toml
from synth_ai.env.backend_url import BackendTarget, as_it_would_start, resolve_backend
from synth_ai.env.dotenv_files import load_command_env
from synth_ai.errors import ConfigError, ConfigIssue, InvalidInputError
from synth_ai.train.plan import TrainPlan, plan_rl, plan_sft


DEFAULT_FOLLOW_S = 3600.0


@dataclass
class TrainOptions:
    configs: list[str] = field(default_factory=list)
    type: str = "auto"  # auto | rl | sft
    env_files: list[str] = field(default_factory=list)
    task_url: str | None = None
    dataset: str | None = None
    backend: str | None = None
    model: str | None = None
    allow_experimental: bool | None = None
    idempotency: str | None = None
    examples: int | None = None
    dry_run: bool = False  # plan only: the embedded backend is shown where it would start (`as_it_would_start`)


@dataclass
class PreparedTraining:
    config: LoadedConfig
    backend: BackendTarget
    plan: TrainPlan
    env_files: list[Path]
    notices: list[str] = field(default_factory=list)  # things the user should know (ignored flags, ...)
    missing_api_key: bool = False  # no key yet (the embedded backend creates one when it first starts)

    def follow_timeout(self, flag: float | None) -> float:
        """How long to follow the job: --poll-timeout, else the SFT config's [job].poll_seconds, else an hour."""
        if flag is not None:
            return flag
        configured = self.config.resolved.get("job", {}).get("poll_seconds") if self.config.kind == "sft" else None
        return float(configured) if isinstance(configured, (int, float)) and configured > 0 else DEFAULT_FOLLOW_S


def select_config(options: TrainOptions, choose) -> tuple[Path, str | None]:
    """The config to train with, and the kind the flags ask for (None = infer from the file)."""
    wanted = {"rl", "sft"} if options.type == "auto" else {options.type}
    if len(options.configs) == 1:
        return Path(options.configs[0]), None if options.type == "auto" else options.type
    if options.configs:
        candidates = [(Path(p), options.type) for p in options.configs]
    else:
        candidates = [(p, k) for p, k in discover_configs(Path.cwd(), wanted)]
        if not candidates:
            raise InvalidInputError("No training configs found under the working directory.",
                                    hint="Pass --config PATH (see examples/configs/ for templates).")
        if len(candidates) == 1:
            return candidates[0][0], candidates[0][1]
    labels = [f"{display_path(p)} ({k})" for p, k in candidates]
    index = choose("Select a training config:", labels, non_interactive_error=InvalidInputError(
        f"Several training configs match: {', '.join(labels)}.", hint="Pass exactly one with --config PATH."))
    path, kind = candidates[index]
    return path, None if kind == "auto" else kind


def _environment_key(env_files: list[Path]) -> str | None:
    from synth_ai.env.environment_key import resolve_environment_key

    key = resolve_environment_key(env_files)
    return key.value if key else None


def prepare_training(options: TrainOptions, choose) -> PreparedTraining:
    if options.examples is not None and options.examples <= 0:
        raise InvalidInputError(f"--examples must be a positive number of records, not {options.examples}.",
                                hint="Pass e.g. --examples 50 to upload only the first 50 records.")
    env_files = load_command_env(options.env_files)
    path, kind = select_config(options, choose)
    if kind is None:
        kind = infer_training_kind(load_toml(path).data)
        if kind is None:
            issue = ConfigIssue("cannot tell whether this is an RL or an SFT config", file=display_path(path),
                                key="[algorithm]", fix='add [algorithm] with type = "online" (RL) or "offline" (SFT)')
            raise ConfigError([issue], file=display_path(path), hint="Or pass --type rl|sft.")
    ctx = ResolveContext(environ=dict(os.environ), allow_experimental=options.allow_experimental,
                         task_url=options.task_url, model=options.model, dataset=options.dataset,
                         require_dataset=True)
    config = load_config(path, kind, ctx)
    notices = _ignored_flags(options, kind)
    backend = resolve_backend(options.backend)
    if options.dry_run:
        backend, moved = as_it_would_start(backend)
        notices += [moved] if moved else []
    api_key = api_key_for(backend)
    if kind == "sft":
        plan = plan_sft(config, backend, api_key=api_key, examples=options.examples, idempotency=options.idempotency)
    else:
        plan = plan_rl(config, backend, api_key=api_key, env_key=_environment_key(env_files),
                       idempotency=options.idempotency)
    return PreparedTraining(config=config, backend=backend, plan=plan, env_files=env_files, notices=notices,
                            missing_api_key=not api_key)


def _ignored_flags(options: TrainOptions, kind: str) -> list[str]:
    ignored = []
    if kind == "sft" and options.task_url:
        ignored.append("--task-url only applies to RL configs; ignored.")
    if kind == "rl" and options.dataset:
        ignored.append("--dataset only applies to SFT configs; ignored.")
    if kind == "rl" and options.examples is not None:
        ignored.append("--examples only applies to SFT configs; ignored.")
    return ignored
