"""Filter config (`synth-ai filter --config`): which traces become SFT examples, and where they go."""

from __future__ import annotations

import math
from datetime import date, datetime, timezone
from typing import Any

from pydantic import BaseModel

from synth_ai.config.common import ResolveContext
from synth_ai.config.diagnostics import Findings, KeyPath, checked_data, validate_section
from synth_ai.config.fields import SECTION, FiniteFloat, NonEmptyStr, NonNegativeInt, PositiveInt, StringList
from synth_ai.config.loaded import LoadedConfig
from synth_ai.config.toml_source import TomlSource


class FilterConfig(BaseModel):
    model_config = SECTION
    db: NonEmptyStr
    output: NonEmptyStr
    splits: StringList | None = None
    task_ids: StringList | None = None
    models: StringList | None = None
    min_official_score: FiniteFloat | None = None
    max_official_score: FiniteFloat | None = None
    min_judge_scores: dict[str, Any] | None = None
    max_judge_scores: dict[str, Any] | None = None
    limit: PositiveInt | None = None
    offset: NonNegativeInt | None = None
    shuffle: bool | None = None
    shuffle_seed: int | None = None
    min_created_at: str | int | float | datetime | date | None = None
    max_created_at: str | int | float | datetime | date | None = None


def load_filter(source: TomlSource, ctx: ResolveContext) -> LoadedConfig:
    findings = Findings(source)
    data = source.data
    cfg = data.get("filter")
    if not isinstance(cfg, dict):
        findings.error(("filter",), "a filter config needs a [filter] table",
                       fix='add [filter] with db = "traces/v3/synth_ai.db" and output = "ft_data/train.jsonl"')
        findings.raise_if_errors()
    root: KeyPath = ("filter",)
    validated = validate_section(findings, FilterConfig, cfg, root)
    raw, cfg = cfg, checked_data(validated, cfg)
    output = cfg.get("output")
    if isinstance(output, str) and output.strip() and not output.lower().endswith((".jsonl", ".json")):
        findings.error_found(root + ("output",), "the output file must end in .jsonl or .json", output,
                             fix="name the output like ft_data/train.jsonl")
    _check_range(findings, root, cfg.get("min_official_score"), cfg.get("max_official_score"),
                 ("min_official_score", "max_official_score"))
    judge_min = _judge_scores(findings, root + ("min_judge_scores",), cfg.get("min_judge_scores"))
    judge_max = _judge_scores(findings, root + ("max_judge_scores",), cfg.get("max_judge_scores"))
    for name in sorted(set(judge_min) & set(judge_max)):
        if judge_min[name] > judge_max[name]:
            findings.error(root + ("min_judge_scores", name),
                           f"minimum {judge_min[name]} is above the maximum {judge_max[name]} for judge '{name}'",
                           fix="lower the minimum or raise the maximum")
    if cfg.get("shuffle_seed") is not None and cfg.get("shuffle") is not True:
        findings.error(root + ("shuffle_seed",), "shuffle_seed needs shuffle = true", fix="add shuffle = true")
    # as written: validation turns `true` into 1, which would read as a time
    created = [_timestamp(findings, root + (key,), raw.get(key)) for key in ("min_created_at", "max_created_at")]
    if created[0] is not None and created[1] is not None and created[0] > created[1]:
        findings.error(root + ("min_created_at",), "min_created_at is after max_created_at",
                       fix="swap the two, or widen the window")
    findings.raise_if_errors()
    assert validated is not None
    resolved = validated.model_dump(mode="json", exclude_none=True)
    resolved["min_judge_scores"], resolved["max_judge_scores"] = judge_min, judge_max
    for key, instant in zip(("min_created_at", "max_created_at"), created, strict=True):
        if instant is not None:  # one form whatever was written (date, datetime, ISO text, epoch seconds)
            resolved[key] = instant.astimezone(timezone.utc).isoformat()
    return LoadedConfig(kind="filter", source=source, resolved={"filter": resolved}, issues=findings.issues)


def _check_range(findings: Findings, root: KeyPath, low: Any, high: Any, names: tuple[str, str]) -> None:
    numbers = [v for v in (low, high) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) == 2 and low > high:
        findings.error(root + (names[0],), f"{names[0]} ({low}) is above {names[1]} ({high})",
                       fix="lower the minimum or raise the maximum")


def _judge_scores(findings: Findings, path: KeyPath, value: Any) -> dict[str, float]:
    """Judge thresholds by name; NaN and infinite thresholds are dropped (they can never filter anything)."""
    scores: dict[str, float] = {}
    if not isinstance(value, dict):
        return scores
    for name, raw in value.items():
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            findings.error_found(path + (name,), "expected a number", raw)
            continue
        if not math.isfinite(raw):
            findings.warn(path + (name,), "NaN or infinite threshold ignored")
            continue
        scores[name] = float(raw)
    return scores


def parse_instant(value: Any) -> datetime | None:
    """An aware instant (UTC when no zone is given) from a datetime, a date (midnight UTC), epoch seconds (a number
    or a numeric string, as 0.2.17 reads them) or ISO-8601 text (also SQLAlchemy's "YYYY-MM-DD HH:MM:SS.ffffff");
    None when it is none of these. Used for the config's bounds and for the `created_at` of stored sessions."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                return None
        else:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    return None


def _timestamp(findings: Findings, path: KeyPath, value: Any) -> datetime | None:
    """The bound as an instant; other types than these were already reported by the schema pass."""
    if value is None:
        return None
    instant = parse_instant(value)
    if instant is None and (isinstance(value, (str, bool, int, float))):
        findings.error_found(path, "expected an ISO-8601 date/time or epoch seconds", value,
                             fix='write e.g. "2026-01-31T00:00:00Z"')
    return instant
