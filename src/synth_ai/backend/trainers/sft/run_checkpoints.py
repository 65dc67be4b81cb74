"""An SFT run's checkpoints: resuming from the newest one in the workdir (refused when it was written with other
settings) and saving one (a sharded model's tensors gathered first, a collective every rank takes part in)."""

from __future__ import annotations

from pathlib import Path

from synth_ai.backend.trainers.common import jsonable
from synth_ai.backend.trainers.sft.run_state import SFTRun
from synth_ai.errors import InvalidInputError


def resume_from_checkpoint(run: SFTRun) -> None:
    """Restore weights, optimizer, schedule, RNG and progress from the newest checkpoint, when there is one."""
    from synth_ai.backend.trainers import checkpoints

    resume_from = checkpoints.latest(run.workdir)
    if resume_from is None:
        return
    saved = checkpoints.load(resume_from)
    if saved["state"].get("fingerprint") != jsonable(run.settings.fingerprint()):
        raise InvalidInputError(f"The checkpoint in {resume_from} was written with other settings; "
                                "refusing to resume from it.",
                                hint="Delete the job's checkpoints folder to start over.")
    _restore_tensors(run, resume_from, saved)
    checkpoints.restore_rng(saved["rng"])
    progress = run.progress
    progress.resumed_from = resume_from
    progress.start_step = int(saved["state"]["step"])
    progress.first_loss = saved["state"].get("train_loss_first")
    history = saved["state"].get("history") or {}
    progress.best = tuple(history["best"]) if history.get("best") else None
    run.reporter.event("sft.training.resumed", f"Resumed from the checkpoint at step {progress.start_step}.",
                       {"step": progress.start_step, "checkpoint": str(resume_from)})


def _restore_tensors(run: SFTRun, resume_from: Path, saved: dict) -> None:
    import torch

    from synth_ai.backend.trainers import fsdp

    tm = run.model
    missing = set(tm.trainable) - set(saved["weights"])
    if missing:
        raise InvalidInputError(f"The checkpoint in {resume_from} lacks {len(missing)} trainable tensors.")
    if tm.sharded:
        fsdp.restore(tm.loss_sum, tm.optimizer, tm.trainable, saved["weights"], saved["optimizer"])
    else:
        with torch.no_grad():
            for name, param in tm.trainable.items():
                param.copy_(saved["weights"][name].to(param.device, param.dtype))
        tm.optimizer.load_state_dict(saved["optimizer"])
    tm.scheduler.load_state_dict(saved["scheduler"])


def save_checkpoint(run: SFTRun, step: int) -> Path | None:
    """The checkpoint after `step` steps; rank 0 writes it and returns its folder, other ranks return None."""
    from synth_ai.backend.trainers import checkpoints
    from synth_ai.backend.trainers import fsdp

    tm, dp, progress = run.model, run.dp, run.progress
    weights, optimizer_state = (fsdp.full_tensors(tm.trainable, dp), fsdp.optimizer_state(tm.loss_sum, tm.optimizer)) \
        if tm.sharded else (tm.trainable, None)  # gathering is a collective: every rank takes part
    if not dp.main:
        return None
    state = {"fingerprint": jsonable(run.settings.fingerprint()), "train_loss_first": progress.first_loss,
             "train_loss_last": progress.last_loss,
             "history": {"best": list(progress.best) if progress.best else None},
             "total_steps": run.plan.total_steps}
    return checkpoints.save(run.workdir, step, trainable=weights, optimizer=tm.optimizer, scheduler=tm.scheduler,
                            state=state, optimizer_state=optimizer_state)
