"""What the RL loop (`rl.loop`) is built from: the `Trainer` contract (every member the loop and its reports use of
the trainer, as `inference/rollout_engine.py RolloutEngine` is the engine's) and `RLParts`, the two factories
that make a job's trainer and rollout engine. A job gets `default_parts()`: `GSPOTrainer` (`rl.step`) and the engine
`engine_choice.build_rollout_engine` picks. Tests of the loop's control flow pass parts of their own
(`tests/fake_rl.py`: an engine answering from a script over real HTTP, a trainer with no model) behind the same two
contracts; `tests/test_rl_run_parts.py` checks `GSPOTrainer` and the fake against `Trainer`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from synth_ai.backend.inference.rollout_engine import RolloutEngine
from synth_ai.backend.trainers.rl.rl_settings import RLSettings
from synth_ai.backend.trainers.rl.types import Sample
from synth_ai.backend.trainers.rl.update import TrainStats
from synth_ai.config.job_specs import RLJobSpec


@runtime_checkable
class Trainer(Protocol):
    """The policy being trained, as the loop sees it. `version` counts the optimiser steps taken in this process
    (`train` moves it and calls `after_step(version)` after each step); `checkpoint` is None on the ranks that do
    not write; `resume` returns the newest checkpoint's state ({} when starting fresh) and reports
    `rl.train.resumed`; `save_final` (called on every rank) returns the `rl:` id of the final model. `adjustment` is the job's LoRA
    settings set aside (event message, data) or None. The rest is reported in `rl.train.started`; `served()`,
    `use_bf16` and `where` are what the built-in and vLLM engines are built from (`engine_choice`)."""

    version: int
    root_base: str
    adjustment: tuple[str, dict[str, Any]] | None
    tokenizer: Any  # decodes sampled ids for the trackers' sample table
    where: Any  # the placement: `.device` ("cpu", "cuda:0")
    dtype_name: str
    trainable_count: int
    vision: bool
    use_bf16: bool
    activation_checkpointing: bool  # the update recomputes the decoder layers in backward
    # fills the engine's served model with the current weights (a sharded policy's, gathered: `rl.sharded_policy`);
    # None: the engine reads the model `served()` gave it
    weight_source: Callable[[Any], None] | None

    def served(self) -> Any: ...  # the policy as an inference engine loads it (`inference.engine.LoadedModel`)

    def train(self, samples: list[Sample], after_step: Callable[[int], None] | None = None) -> TrainStats: ...

    def checkpoint(self, iteration: int, history: list[dict[str, Any]], last_eval: float | None) -> Path | None: ...

    def resume(self, reporter: Any) -> dict[str, Any]: ...

    def save_final(self, history: list[dict[str, Any]], last_eval: float | None) -> str: ...


@dataclass(frozen=True)
class RLParts:
    """How a job's trainer and rollout engine are made: `make_trainer(settings, model_store, workdir)` first (it is
    resumed), then `make_engine(settings, trainer, spec, reporter, ranks)` over it."""

    make_trainer: Callable[[RLSettings, Any, Path], Trainer]
    make_engine: Callable[[RLSettings, Trainer, RLJobSpec, Any, int], RolloutEngine]


def _gspo_trainer(settings: RLSettings, model_store: Any, workdir: Path) -> Trainer:
    from synth_ai.backend.trainers.rl.step import GSPOTrainer

    return GSPOTrainer(settings, model_store, workdir)


def _chosen_engine(settings: RLSettings, trainer: Trainer, spec: RLJobSpec, reporter: Any,
                   ranks: int) -> RolloutEngine:
    from synth_ai.backend.trainers.rl.engine_choice import build_rollout_engine

    return build_rollout_engine(settings, trainer, spec, reporter, ranks=ranks)


def default_parts() -> RLParts:
    """A job's parts: the GSPO trainer and the engine chosen for the job (built-in, or vLLM on GPUs)."""
    return RLParts(make_trainer=_gspo_trainer, make_engine=_chosen_engine)
