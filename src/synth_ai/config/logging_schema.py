"""The `[logging]` table of SFT, RL and eval configs: which experiment trackers a run reports to (Weights & Biases,
TensorBoard, MLflow) and how its run there is named. What is logged, and where, is in docs/tracking.md; the
trackers themselves are `synth_ai.tracking`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator

from synth_ai.config.fields import SECTION, NonEmptyStr, NonNegativeInt, StringList

TRACKERS = ("wandb", "tensorboard", "mlflow")
DEFAULT_SAMPLE_ROWS = 8

Tracker = Literal["wandb", "tensorboard", "mlflow"]


def _one_or_many(value: Any) -> Any:
    """`report_to = "wandb"` means `["wandb"]`, as in TRL; "none" (any case) means none."""
    if isinstance(value, str):
        return [] if value.strip().lower() in ("", "none") else [value.strip()]
    return value


class LoggingSection(BaseModel):
    """Experiment trackers for the run (docs/tracking.md). Empty or absent `report_to`: none."""

    model_config = SECTION
    report_to: Annotated[list[Tracker], BeforeValidator(_one_or_many)] | None = None
    project: NonEmptyStr | None = None  # W&B project / MLflow experiment; default WANDB_PROJECT, then "synth-ai"
    run_name: NonEmptyStr | None = None  # default: the job id (eval: "eval-<model>-<time>")
    tags: StringList | None = None
    tensorboard_dir: NonEmptyStr | None = None  # default: <data dir>/tracking/tensorboard/<job id>
    # rows of each rollout sample table (RL: per iteration; eval: per run); 0 logs no tables
    sample_rows: NonNegativeInt | None = None
