"""What a run reports to: the `[logging]` table of its config, with the trackers' usual environment variables as
defaults, resolved for one run (a job, an eval, a backfill)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.config.logging_schema import DEFAULT_SAMPLE_ROWS, TRACKERS

DEFAULT_PROJECT = "synth-ai"


@dataclass(frozen=True)
class TrackingSettings:
    report_to: tuple[str, ...]
    run_id: str  # stable across a job's restarts: the same W&B run, MLflow run and TensorBoard folder continue
    run_name: str
    wandb_project: str
    mlflow_experiment: str
    tags: tuple[str, ...]
    tensorboard_dir: Path
    wandb_dir: Path  # WANDB_DIR, read here and passed to wandb.init: wandb reads its environment once per process
    sample_rows: int


def tracking_root(data_dir: Path) -> Path:
    return Path(data_dir) / "tracking"


def resolve_tracking(logging: Mapping[str, Any] | None, *, run_id: str, data_dir: Path,
                     environ: Mapping[str, str], run_name: str | None = None,
                     report_to: tuple[str, ...] | None = None) -> TrackingSettings | None:
    """The run's settings, or None when it reports nowhere. `report_to` overrides the table's (the backfill's
    `--to`). Defaults: the W&B project is WANDB_PROJECT, the MLflow experiment MLFLOW_EXPERIMENT_NAME (both
    "synth-ai" when unset), the run name the run id, TensorBoard's folder `<data dir>/tracking/tensorboard/<run id>`
    and W&B's `<data dir>/tracking` unless WANDB_DIR is set."""
    table = dict(logging or {})
    wanted = report_to if report_to is not None else table.get("report_to") or ()
    wanted = (wanted,) if isinstance(wanted, str) else tuple(wanted)  # `report_to = "wandb"`, as the config allows
    chosen = tuple(t for t in TRACKERS if t in wanted)  # one of each, in a fixed order
    if not chosen:
        return None
    project = table.get("project")
    root = tracking_root(data_dir)
    tb_dir = Path(table["tensorboard_dir"]).expanduser() if table.get("tensorboard_dir") else \
        root / "tensorboard" / run_id
    return TrackingSettings(
        report_to=chosen, run_id=run_id, run_name=str(table.get("run_name") or run_name or run_id),
        wandb_project=str(project or environ.get("WANDB_PROJECT") or DEFAULT_PROJECT),
        mlflow_experiment=str(project or environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_PROJECT),
        tags=tuple(str(t) for t in table.get("tags") or ()), tensorboard_dir=tb_dir,
        wandb_dir=Path(environ["WANDB_DIR"]).expanduser() if environ.get("WANDB_DIR") else root,
        sample_rows=int(table["sample_rows"]) if table.get("sample_rows") is not None else DEFAULT_SAMPLE_ROWS)


def logging_of_job(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """A job's `[logging]` table, from its stored payload or its API document: SFT carries it in
    `metadata.effective_config`, RL in `data.config` (the whole resolved config)."""
    for holder in (_dig(job, "metadata", "effective_config"), _dig(job, "data", "config")):
        table = holder.get("logging") if isinstance(holder, dict) else None
        if isinstance(table, dict):
            return table
    return None


def config_of_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """The job's resolved config as a tracker's run config: RL's whole config; SFT's model, hyperparameters and
    effective config. Secrets are masked later (`public_config`)."""
    rl_config = _dig(job, "data", "config")
    if isinstance(rl_config, dict):
        return {"model": job.get("model") or _dig(job, "data", "model") or _dig(job, "data", "base_model"),
                **rl_config}
    config: dict[str, Any] = {"model": job.get("model")}
    if isinstance(job.get("hyperparameters"), dict):
        config["hyperparameters"] = job["hyperparameters"]
    effective = _dig(job, "metadata", "effective_config")
    if isinstance(effective, dict):
        config.update({k: v for k, v in effective.items() if k not in config})
    return config


def _dig(doc: Any, *keys: str) -> Any:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, Mapping) else None
    return doc
