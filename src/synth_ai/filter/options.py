"""`FilterOptions`: a validated `[filter]` table (see `synth_ai.config.filter`) in the form the flow uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from synth_ai.config.loaded import LoadedConfig
from synth_ai.errors import InvalidInputError
from synth_ai.tracing.store import db_path_from_url

DEFAULT_SHUFFLE_SEED = 0  # `shuffle = true` without a seed still gives the same file on every run


@dataclass(frozen=True)
class FilterOptions:
    db: Path
    output: Path
    splits: frozenset[str] = frozenset()
    task_ids: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()
    min_official_score: float | None = None
    max_official_score: float | None = None
    min_judge_scores: dict[str, float] = field(default_factory=dict)
    max_judge_scores: dict[str, float] = field(default_factory=dict)
    min_created_at: datetime | None = None
    max_created_at: datetime | None = None
    limit: int | None = None
    offset: int = 0
    shuffle_seed: int | None = None  # None: oldest session first; else the seeded shuffled order

    @property
    def wants_official_score(self) -> bool:
        return self.min_official_score is not None or self.max_official_score is not None


def options_from_config(loaded: LoadedConfig, *, base_dir: Path | None = None) -> FilterOptions:
    """Relative `db` and `output` paths resolve against `base_dir` (the working directory, as in 0.2.17); a
    relative `db` missing there but present beside the config file is taken from there (as SFT datasets are)."""
    cfg: dict[str, Any] = loaded.resolved["filter"]
    base = base_dir or Path.cwd()
    try:
        db = db_path_from_url(str(cfg["db"]))
    except ValueError as exc:
        raise InvalidInputError(f"{loaded.source.display}: [filter].db: {exc}",
                                hint='Use a file path such as db = "traces/v3/synth_ai.db".') from exc
    if not db.is_absolute():
        beside_config = loaded.path.parent / db
        db = base / db if (base / db).exists() or not beside_config.exists() else beside_config
    output = Path(str(cfg["output"])).expanduser()
    shuffle = cfg.get("shuffle") is True
    return FilterOptions(
        db=db.absolute(),
        output=((base / output) if not output.is_absolute() else output).resolve(),
        splits=frozenset(cfg.get("splits") or ()),
        task_ids=frozenset(cfg.get("task_ids") or ()),
        models=frozenset(cfg.get("models") or ()),
        min_official_score=cfg.get("min_official_score"),
        max_official_score=cfg.get("max_official_score"),
        min_judge_scores=dict(cfg.get("min_judge_scores") or {}),
        max_judge_scores=dict(cfg.get("max_judge_scores") or {}),
        min_created_at=_instant(cfg.get("min_created_at")),
        max_created_at=_instant(cfg.get("max_created_at")),
        limit=cfg.get("limit"),
        offset=int(cfg.get("offset") or 0),
        shuffle_seed=(cfg.get("shuffle_seed", DEFAULT_SHUFFLE_SEED) if shuffle else None),
    )


def _instant(value: Any) -> datetime | None:
    """The config layer has already checked the value and written it as an ISO-8601 UTC instant."""
    return None if value is None else datetime.fromisoformat(str(value))


def find_filter_config(root: Path | None = None) -> Path:
    """The one filter TOML under `root` (default: the working directory); several or none is an error that
    names them, since guessing which sessions to export would be worse than asking."""
    from synth_ai.config.discovery import discover_configs
    from synth_ai.errors import NotFoundError

    base = (root or Path.cwd()).resolve()
    found = [path for path, _ in discover_configs(base, {"filter"})]
    if not found:
        raise NotFoundError(f"No filter config (a TOML with a [filter] table) under {base}.",
                            hint="Pass --config PATH, e.g. synth-ai filter --config examples/configs/filter_math.toml")
    if len(found) > 1:
        listing = "\n".join(f"  {path}" for path in found[:20])
        raise InvalidInputError(f"{len(found)} filter configs under {base}; say which one with --config:\n{listing}",
                                hint=f"synth-ai filter --config {found[0]}")
    return found[0]
