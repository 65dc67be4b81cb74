"""Eval config (`synth-ai eval --config`): the `[eval]` table (or the whole file) of synth-ai 0.2.17."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from synth_ai.config import model_rules
from synth_ai.config.common import PolicyRuntimeSection, ResolveContext, ThinkingMode
from synth_ai.config.diagnostics import Findings, KeyPath, checked_data, validate_section
from synth_ai.config.fields import (
    SECTION,
    FiniteFloat,
    NonEmptyStr,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Seeds,
    StringList,
)
from synth_ai.config.loaded import LoadedConfig
from synth_ai.config.logging_schema import LoggingSection
from synth_ai.config.toml_source import TomlSource
from synth_ai.errors import InvalidInputError
from synth_ai.models.registry import FINE_TUNED_PREFIXES, ModelInfo, resolve_model


class EvalConfig(BaseModel):
    model_config = SECTION
    app_id: NonEmptyStr
    model: NonEmptyStr
    seeds: Seeds
    concurrency: PositiveInt = 1
    max_llm_calls: PositiveInt = 10
    max_turns: PositiveInt | None = None
    trace_format: Literal["compact", "full", "structured"] = "structured"
    task_app_url: str | None = None
    split: str | None = None
    env_name: str | None = None
    policy_name: str | None = None
    return_trace: bool | None = None
    ops: StringList | None = None
    env_config: dict[str, Any] | None = None
    policy_config: PolicyRuntimeSection | None = None
    metadata: dict[str, Any] | None = None
    metadata_sql: str | None = None
    env_file: str | None = None
    policy: PolicyRuntimeSection | None = None
    temperature: FiniteFloat | None = None
    max_tokens: PositiveInt | None = None
    reasoning_effort: str | None = None
    system_hint: str | None = None
    tool_choice: str | dict[str, Any] | None = None
    inference_url: str | None = None
    thinking_mode: ThinkingMode | None = None
    thinking_budget: PositiveInt | None = None
    use_vision: bool | None = None
    image_only_mode: bool | None = None
    judge: dict[str, Any] | None = None
    judges: list[dict[str, Any]] | None = None
    # ours: a per-seed deadline for the whole /rollout call, how long a seed waits for an unreachable task app (0:
    # not at all), where traces go (`none` stores nothing), and a seed from which each rollout's sampling seed is
    # derived (policy config `seed`), so a re-run samples alike
    rollout_timeout_s: PositiveFloat | None = None
    task_app_wait_s: NonNegativeFloat | None = None
    trace_db: str | None = None
    sampling_seed: NonNegativeInt | None = None
    # experiment trackers (docs/tracking.md); a file with an [eval] table puts it beside it, as [logging]
    logging: LoggingSection | None = None


def load_eval(source: TomlSource, ctx: ResolveContext) -> LoadedConfig:
    findings = Findings(source)
    data = source.data
    root: KeyPath = ("eval",) if isinstance(data.get("eval"), dict) else ()
    cfg = data["eval"] if root else data
    if ctx.model:
        cfg = {**cfg, "model": ctx.model}
    validated = validate_section(findings, EvalConfig, cfg, root)
    cfg = checked_data(validated, cfg)
    logging = validate_section(findings, LoggingSection, data["logging"], ("logging",)) \
        if root and "logging" in data else None
    _check_judges(findings, cfg, root)
    info = _check_model(findings, cfg, root)
    model_rules.check_eval(findings, info, root, cfg)
    findings.raise_if_errors()
    assert validated is not None
    resolved = validated.model_dump(mode="json", exclude_none=True)
    if logging is not None:
        resolved["logging"] = logging.model_dump(mode="json", exclude_none=True)
    if info is not None:
        resolved["model"] = resolve_model(str(cfg["model"])).canonical
    return LoadedConfig(kind="eval", source=source, resolved=resolved, issues=findings.issues)


def names_model_endpoint(cfg: dict[str, Any]) -> bool:
    """Whether the [eval] table names its own model endpoint (`inference_url` at the top, in `policy` or in
    `policy_config`, the later winning as the policy config merges them); otherwise a Synth backend serves the
    model."""
    url = None
    for table in (cfg, cfg.get("policy"), cfg.get("policy_config")):
        if isinstance(table, dict) and table.get("inference_url") is not None:
            url = table["inference_url"]
    return bool(url)


def _check_model(findings: Findings, cfg: dict[str, Any], root: KeyPath) -> ModelInfo | None:
    """The registry entry of the model. A model a Synth backend serves must be one it has: the rule and message
    `train` applies (a typo stops here, with the closest ids, before any rollout). A model at the config's own
    `inference_url` may be anything that server knows, and a fine-tuned or imported id (`ft:`, `rl:`, `imported:`,
    a Tinker checkpoint's `tinker://` path) one the backend holds: it may continue a model no registry lists (one built or imported there), so the backend
    decides, as it does for `train`."""
    model = cfg.get("model")
    if not isinstance(model, str) or not model.strip():
        return None
    try:
        return resolve_model(model).base
    except InvalidInputError as exc:
        if not names_model_endpoint(cfg) and not _names_a_trained_model(model):
            findings.error_found(root + ("model",), exc.message, model, fix=exc.hint)
        return None


def _names_a_trained_model(model: str) -> bool:
    """A fine-tuned or imported id, or a Tinker training client's checkpoint (`tinker://...`, docs/tinker.md)."""
    head, sep, _ = model.strip().partition(":")
    return bool(sep) and (head.lower() in FINE_TUNED_PREFIXES or model.strip().lower().startswith("tinker://"))


def _check_judges(findings: Findings, cfg: dict[str, Any], root: KeyPath) -> None:
    judges: list[tuple[KeyPath, Any]] = []
    judge = cfg.get("judge")
    if isinstance(judge, dict):
        if "module" in judge or "path" in judge:
            judges.append((root + ("judge",), judge))
        else:  # nested tables, one per judge
            nested = [(root + ("judge", name), spec) for name, spec in judge.items() if isinstance(spec, dict)]
            # no nested table at all: one judge table that lacks module/path (not silently nothing)
            judges.extend(nested or ([(root + ("judge",), judge)] if judge else []))
    if isinstance(cfg.get("judges"), list):
        judges.extend((root + ("judges", i), spec) for i, spec in enumerate(cfg["judges"]))
    for path, spec in judges:
        if not isinstance(spec, dict):
            findings.error_found(path, "expected a table describing a judge", spec)
            continue
        has_module, has_path = "module" in spec, "path" in spec
        if has_module == has_path:
            findings.error(path, "a judge needs exactly one of `module` or `path`",
                           fix='set module = "my_pkg.judges" or path = "judges/score.py"')
