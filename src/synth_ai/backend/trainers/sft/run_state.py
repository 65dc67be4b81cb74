"""What the stages of one SFT run share: its settings, rank, reporter, inputs, plan and model, and the progress a
checkpoint carries (the loss history the result reports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.backend.trainers.sft.inputs import TrainingData
from synth_ai.backend.trainers.sft.model_setup import TrainingModel
from synth_ai.backend.trainers.sft.plan import StepPlan
from synth_ai.backend.trainers.runtime import Runtime
from synth_ai.backend.trainers.sft.sft_settings import Reporter, Settings


@dataclass
class Progress:
    start_step: int = 0
    resumed_from: Path | None = None  # the checkpoint the run resumed from
    first_loss: float | None = None  # the run's first training loss (kept across resumes)
    last_loss: float | None = None  # the latest training loss of this process
    best: tuple[float, int] | None = None  # (validation loss, step) of the best validation so far

    def record_loss(self, value: float) -> None:
        if self.first_loss is None:
            self.first_loss = value
        self.last_loss = value


@dataclass
class SFTRun:
    settings: Settings
    dp: Any  # distributed.current(): this process's rank
    reporter: Reporter
    workdir: Path
    runtime: Runtime
    data: TrainingData
    plan: StepPlan
    model: TrainingModel
    progress: Progress = field(default_factory=Progress)
