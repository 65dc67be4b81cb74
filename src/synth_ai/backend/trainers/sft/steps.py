"""The optimizer steps of an SFT run, with what happens between them: a stop, with its reason (checkpoint, then
`TrainingCancelled`), per-step metrics, progress events, validation every `eval_steps` and checkpoints every
`save_steps` (or after 10 minutes without one).

The loss of a step is summed over its micro-batches and divided by the step's labelled-token count (all ranks
together), so gradient accumulation and data parallelism give the gradient of one big batch."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from synth_ai.backend.trainers.sft.run_checkpoints import save_checkpoint
from synth_ai.backend.trainers.sft.run_state import SFTRun
from synth_ai.backend.trainers.common import stop_reason
from synth_ai.backend.trainers.sft.sft_settings import TrainingCancelled
from synth_ai.backend.trainers.sft.validation import validate

PROGRESS_EVERY_S = 30  # a progress event at least this often, whatever logging_steps says
CHECKPOINT_EVERY_S = 600  # a checkpoint at least this often, whatever save_steps says


def train_steps(run: SFTRun, should_stop: Callable[[], bool]) -> tuple[int, float]:
    """Run the steps left; return (tokens trained, seconds spent)."""
    plan, progress, reporter = run.plan, run.progress, run.reporter
    loop_started = time.perf_counter()
    trained_tokens = 0
    last_save = last_progress = time.monotonic()
    for step in range(progress.start_step, plan.total_steps):
        if run.dp.any(should_stop()):
            _stop(run, step, stop_reason(should_stop))
        t0 = time.perf_counter()
        lr = run.model.scheduler.get_last_lr()[0]
        value, batches, grad_norm = _optimizer_step(run, step)
        elapsed = time.perf_counter() - t0
        tokens = int(run.dp.sum(sum(b["tokens"] for b, w in batches if w)))
        trained_tokens += tokens
        progress.record_loss(value)
        reporter.metric("train.loss", step, value)
        reporter.metric("learning_rate", step, lr)
        reporter.metric("tokens_per_second", step, tokens / max(elapsed, 1e-9))
        if math.isfinite(grad_norm):
            reporter.metric("grad_norm", step, grad_norm)
        done = step + 1
        if done % plan.log_every == 0 or done == plan.total_steps or step == progress.start_step or \
                time.monotonic() - last_progress > PROGRESS_EVERY_S:
            last_progress = time.monotonic()
            _report_progress(run, done, value, lr, trained_tokens, time.perf_counter() - loop_started)
        if plan.eval_every and done % plan.eval_every == 0 and done != plan.total_steps:
            validate(run, done)
        if done != plan.total_steps and (done % plan.save_every == 0 or
                                         time.monotonic() - last_save > CHECKPOINT_EVERY_S):
            path = save_checkpoint(run, done)
            last_save = time.monotonic()
            reporter.event("sft.checkpoint.saved", f"Checkpoint saved at step {done}.",
                           {"step": done, "path": str(path)})
    return trained_tokens, time.perf_counter() - loop_started


def _optimizer_step(run: SFTRun, step: int) -> tuple[float, list[tuple[dict[str, Any], float]], float]:
    """One update over this rank's share of the step's micro-batches; (the step's loss over all ranks, the
    batches with their weights, the gradient norm before clipping)."""
    import torch

    from synth_ai.backend.trainers import fsdp

    dp, tm, train = run.dp, run.model, run.data.train
    step_items = run.plan.step_items(step)
    passes = fsdp.padded(dp.shard(step_items), step_items, dp) if tm.sharded else \
        [(idx, 1.0) for idx in dp.shard(step_items)]
    batches = [(run.data.device_batch([train[i] for i in idx], run.runtime.where.device), weight)
               for idx, weight in passes]
    labelled = dp.sum(sum(int((b["labels"][:, 1:] != -100).sum()) for b, w in batches if w))
    step_loss = 0.0
    for b, weight in batches:
        loss = tm.loss_sum(b) / labelled
        if weight != 1.0:  # a pass a sharded rank runs only to keep in step with the others
            loss = loss * weight
        loss.backward()
        step_loss += loss.detach()
    parameters = list(tm.trainable.values())
    if not tm.sharded:
        dp.sum_grads(parameters)
    # the norm is measured either way (max_grad_norm 0: no clipping); a sharded model's is a DTensor
    limit = run.settings.max_grad_norm if run.settings.max_grad_norm > 0 else float("inf")
    norm = torch.nn.utils.clip_grad_norm_(parameters, limit)
    grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    tm.optimizer.step()
    tm.scheduler.step()
    tm.optimizer.zero_grad(set_to_none=True)
    return dp.sum(float(step_loss)), batches, grad_norm


def _report_progress(run: SFTRun, done: int, value: float, lr: float, trained_tokens: int, spent: float) -> None:
    total_steps = run.plan.total_steps
    rate = (done - run.progress.start_step) / max(spent, 1e-9)
    run.reporter.event("sft.progress", f"step {done}/{total_steps} loss {value:.4f}",
                       {"step": done, "total_steps": total_steps, "loss": value, "learning_rate": lr,
                        "epoch": run.plan.epoch_after(done),
                        "tokens_per_second": round(trained_tokens / max(spent, 1e-9), 1),
                        "elapsed_s": round(spent, 2), "eta_s": round((total_steps - done) / max(rate, 1e-9), 1)})


def _stop(run: SFTRun, step: int, why: str) -> None:
    """Stop between steps, saying why: a checkpoint of the steps this process ran (else the one it resumed from)."""
    progress = run.progress
    saved_at = save_checkpoint(run, step) if step > progress.start_step else progress.resumed_from
    run.reporter.event("sft.training.stopped", f"Stopped at step {step} of {run.plan.total_steps} because {why}.",
                       {"step": step, "checkpoint": str(saved_at) if saved_at else None, "reason": why})
    raise TrainingCancelled(step, saved_at)
