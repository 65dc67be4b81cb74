"""The step plan of an SFT run: which micro-batches each optimizer step trains on, and how often it logs,
evaluates and checkpoints.

Under torchrun a step takes `accum` micro-batches on each of the `world` ranks (global batch =
per_device_batch x accum x world); one process with accum x world gives the same steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from synth_ai.backend.trainers.sft.sft_settings import Settings


@dataclass(frozen=True)
class StepPlan:
    micro: list[list[int]]  # every micro-batch of the run in order, as indices into the training examples
    batch: int  # examples per micro-batch
    step_micro: int  # micro-batches per optimizer step, all ranks together
    per_epoch: int  # micro-batches per epoch
    total_micro: int
    total_steps: int
    warmup_steps: int
    save_every: int
    log_every: int
    eval_every: int  # 0: no evaluation between steps

    def step_items(self, step: int) -> list[list[int]]:
        return self.micro[step * self.step_micro:(step + 1) * self.step_micro]

    def epoch_after(self, done: int) -> float:
        """Epochs trained after `done` steps."""
        return round(min(done * self.step_micro, self.total_micro) / self.per_epoch, 3)


def plan_steps(settings: Settings, train: list[Any], val: list[Any], world: int) -> StepPlan:
    from synth_ai.backend.trainers.sft.data import epoch_batches

    batch, accum = settings.per_device_batch, settings.gradient_accumulation_steps
    step_micro = accum * world
    lengths = [e.length for e in train]
    per_epoch = math.ceil(len(train) / batch)
    if settings.total_steps:
        total_steps = settings.total_steps
        total_micro = total_steps * step_micro
    else:
        total_micro = per_epoch * (settings.n_epochs or 1)
        total_steps = math.ceil(total_micro / step_micro)
    micro: list[list[int]] = []
    epoch = 0
    while len(micro) < total_micro:
        micro.extend(epoch_batches(lengths, batch, settings.seed, epoch))
        epoch += 1
    return StepPlan(micro=micro[:total_micro], batch=batch, step_micro=step_micro, per_epoch=per_epoch,
                    total_micro=total_micro, total_steps=total_steps,
                    warmup_steps=math.ceil(settings.warmup_ratio * total_steps),
                    save_every=settings.save_steps or max(1, math.ceil(total_steps / 4)),
                    log_every=settings.logging_steps or max(1, total_steps // 20),
                    eval_every=settings.eval_steps if val else 0)
