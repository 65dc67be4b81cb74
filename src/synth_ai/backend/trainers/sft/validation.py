"""Validation during an SFT run: the loss over the held-out examples' labelled tokens, reported as `val.loss` with
the best value so far."""

from __future__ import annotations

from synth_ai.backend.trainers.sft.run_state import SFTRun


def validate(run: SFTRun, step: int) -> None:
    """Every rank of a sharded model takes part (its forward is a collective); only rank 0 reports."""
    if not run.dp.main and not run.model.sharded:
        return
    value, count = _validation_loss(run)
    if not run.dp.main:
        return
    progress, val = run.progress, run.data.val
    run.reporter.metric("val.loss", step, value, phase="eval")
    if progress.best is None or value < progress.best[0]:
        progress.best = (value, step)
    run.reporter.event("sft.validation.summary", f"step {step}: val.loss {value:.4f} on {len(val)} examples",
                       {"step": step, "val_loss": value, "examples": len(val), "label_tokens": count,
                        "best_val_loss": progress.best[0], "best_step": progress.best[1]})


def _validation_loss(run: SFTRun) -> tuple[float, int]:
    """(mean loss per labelled token, labelled tokens), in length order so batches pad little."""
    import torch

    model, val, batch = run.model, run.data.val, run.plan.batch
    model.model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        order = sorted(range(len(val)), key=lambda i: val[i].length)
        for i in range(0, len(order), batch):
            b = run.data.device_batch([val[j] for j in order[i:i + batch]], run.runtime.where.device)
            total += float(model.loss_sum(b))
            count += int((b["labels"][:, 1:] != -100).sum())
    model.model.train()
    return total / max(1, count), count
