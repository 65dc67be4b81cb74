"""Everything `eval` decides before the first request: the config (named, or discovered), env files, and each
setting with its precedence: flag > TOML > default (unlike synth-ai 0.2.17, the TOML's `task_app_url`, `split`,
`max_turns` and top-level `max_llm_calls` are honoured)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.config.common import ResolveContext
from synth_ai.config.toml_source import display_path
from synth_ai.errors import InvalidInputError
from synth_ai.models.registry import resolve_model
from synth_ai.taskapp.reachability import DEFAULT_WAIT_S

DEFAULT_SEEDS = [0, 1, 2, 3, 4]
DEFAULT_TRACE_DB = Path("traces") / "v3" / "synth_ai.db"
DISABLED_TRACE_DB = {"none", "off", "disable", "disabled", "false", "0"}
DEFAULT_ROLLOUT_TIMEOUT_S = 300.0


@dataclass
class EvalOptions:
    """The command-line flags (None = not given)."""

    app_id: str | None = None
    config: str | None = None
    model: str | None = None
    seeds: str | None = None
    split: str | None = None
    url: str | None = None
    env_files: list[str] = field(default_factory=list)
    trace_db: str | None = None
    metadata: list[str] = field(default_factory=list)
    metadata_sql: str | None = None
    concurrency: int | None = None
    backend: str | None = None
    rollout_timeout: float | None = None


@dataclass
class EvalSettings:
    model: str
    seeds: list[int]
    split: str
    concurrency: int
    rollout_timeout: float
    task_app_wait: float  # seconds a seed waits for an unreachable task app (eval.runner)
    app_id: str | None  # None with --url when neither the argument nor the TOML names it
    url: str | None  # None: run the app in-process
    trace_db: Path | None  # None: traces are not stored
    metadata: dict[str, str]
    metadata_sql: str | None
    config: dict[str, Any]  # the validated [eval] table (resolved), {} without a config file
    config_path: Path | None
    env_files: list[Path]
    backend: str | None
    notices: list[str] = field(default_factory=list)


def find_eval_config(root: Path) -> Path | None:
    """The first eval TOML under `root`, ranked as the reference ranks them: under `configs/`, under `examples/`,
    a name starting with `eval`, then the path."""
    from synth_ai.config.discovery import discover_configs

    found = [p for p, _ in discover_configs(root, {"eval"})]
    named = [p for p in found if "eval" in p.name.lower()] or found

    def rank(path: Path) -> tuple[Any, ...]:
        parts = path.relative_to(root).parts
        return ("configs" not in parts, "examples" not in parts, not path.name.lower().startswith("eval"), str(path))

    return min(named, key=rank) if named else None


def parse_metadata(pairs: list[str]) -> dict[str, str]:
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(f"Metadata filter {pair!r} must be key=value.",
                                    hint="e.g. --metadata difficulty=easy (repeatable).")
        result[key.strip()] = value.strip()
    return result


def parse_seed_flag(text: str) -> list[int]:
    from pydantic_core import PydanticCustomError

    from synth_ai.config.fields import parse_seeds

    try:
        return parse_seeds(text)
    except PydanticCustomError as exc:
        raise InvalidInputError(f"Unable to parse seeds from {text!r}: {exc.message()}.",
                                hint="Use comma-separated integers and ranges, e.g. --seeds 0,1,2 or --seeds 0-9.") \
            from None


def resolve_trace_db(flag: str | None, toml_value: Any, base: Path) -> Path | None:
    raw = flag if flag is not None else toml_value
    if raw is None:
        return (Path.cwd() / DEFAULT_TRACE_DB).resolve()
    text = str(raw).strip()
    if text.lower() in DISABLED_TRACE_DB:
        return None
    from synth_ai.tracing.store import db_path_from_url

    try:
        path = db_path_from_url(text)
    except ValueError as exc:
        raise InvalidInputError(f"--trace-db {text!r}: {exc}.",
                                hint="Pass a file path (or sqlite:///path), or `none` to store nothing.") from None
    return (path if path.is_absolute() or flag is not None else base / path).resolve()


def _positive(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise InvalidInputError(f"{name} must be greater than zero, not {value!r}.")


def resolve_settings(options: EvalOptions) -> EvalSettings:
    from synth_ai.env.dotenv_files import load_command_env

    _positive("--concurrency", options.concurrency)
    _positive("--rollout-timeout", options.rollout_timeout)
    env_files = load_command_env(options.env_files)
    notices: list[str] = []
    config_path = Path(options.config) if options.config else None
    if config_path is None and not (options.model and (options.app_id or options.url)):
        config_path = find_eval_config(Path.cwd())
        if config_path is not None:
            notices.append(f"Using eval config: {display_path(config_path)}")
    cfg: dict[str, Any] = {}
    if config_path is not None:
        from synth_ai.config.loader import load_config
        from synth_ai.errors import NotFoundError

        if not config_path.is_file():
            raise NotFoundError(f"Eval config not found: {config_path.resolve()}",
                                hint="Check the --config path (examples/configs/eval_math.toml is a template).")
        loaded = load_config(config_path, "eval", ResolveContext(environ=dict(os.environ), model=options.model))
        cfg = loaded.resolved
        notices.extend(i.render() for i in loaded.issues if i.severity == "warning")
        if not options.env_files and cfg.get("env_file"):
            extra = Path(cfg["env_file"]).expanduser()
            extra = extra if extra.is_absolute() else config_path.parent / extra
            env_files += load_command_env([extra])
    base = config_path.parent if config_path is not None else Path.cwd()
    model = cfg.get("model") or options.model  # a loaded config already holds --model (in canonical case)
    if not model:
        raise InvalidInputError("No model to evaluate.",
                                hint="Pass --model (e.g. a base id, ft:…/rl:… from `train`) or set [eval].model.")
    if config_path is None:  # a Synth backend serves it: train's rule, before any rollout (a loaded config had it)
        model = resolve_model(str(model)).canonical
    seeds = parse_seed_flag(options.seeds) if options.seeds else list(cfg.get("seeds") or DEFAULT_SEEDS)
    url = options.url or cfg.get("task_app_url") or None
    app_id = options.app_id or cfg.get("app_id")
    if url is None and cfg.get("app_id") and options.app_id and options.app_id != cfg["app_id"]:
        notices.append(f"APP_ID {options.app_id!r} overrides [eval].app_id {cfg['app_id']!r}.")
    metadata = {str(k): str(v) for k, v in (cfg.get("metadata") or {}).items()}
    metadata.update(parse_metadata(options.metadata))
    return EvalSettings(
        model=str(model), seeds=seeds, split=options.split or cfg.get("split") or "train",
        concurrency=int(options.concurrency or cfg.get("concurrency") or 1),
        rollout_timeout=float(options.rollout_timeout or cfg.get("rollout_timeout_s") or DEFAULT_ROLLOUT_TIMEOUT_S),
        task_app_wait=float(DEFAULT_WAIT_S if cfg.get("task_app_wait_s") is None else cfg["task_app_wait_s"]),
        app_id=app_id, url=url.rstrip("/") if url else None,
        trace_db=resolve_trace_db(options.trace_db, cfg.get("trace_db"), base),
        metadata=metadata, metadata_sql=options.metadata_sql or cfg.get("metadata_sql"),
        config=cfg, config_path=config_path, env_files=env_files, backend=options.backend, notices=notices,
    )
