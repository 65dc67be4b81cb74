"""The end of an SFT run: the trained model saved as `<workdir>/final` with its card, registered as
`ft:<root base>:<job id>`, and the job's result. Under torchrun rank 0 saves; a sharded model is gathered whole
first (every rank takes part)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from synth_ai.backend.trainers.sft.run_state import SFTRun


def save_final_model(run: SFTRun, model_store: Any, trained_tokens: int, loop_s: float) -> dict[str, Any]:
    from synth_ai.backend.trainers.common import save_final

    settings, tm, progress = run.settings, run.model, run.progress
    final_dir = run.workdir / "final"
    fine_tuned = f"ft:{tm.root_base}:{settings.job_id}"
    final_model = _unsharded_model(run, model_store) if tm.sharded else tm.model
    if not run.dp.main:  # rank 0 saves and registers the model; the job's result is the same on every rank
        return {"fine_tuned_model": fine_tuned, "steps": run.plan.total_steps, "rank": run.dp.rank}
    card = settings
    if tm.continued_adapter:  # an imported adapter trained further stays an adapter on the root base
        card = replace(settings, base_model=tm.root_base, mode="lora")
    elif tm.root_base != settings.base_model:  # started from a fine-tune: the saved model (merged) names the root base
        final_model = final_model.merge_and_unload() if settings.mode == "lora" else final_model
        card = replace(settings, base_model=tm.root_base, mode="full")
    save_final(final_model, run.data.tokenizer, run.runtime.base_path, final_dir, card, fine_tuned,
               {"steps": run.plan.total_steps, "train_loss_first": progress.first_loss,
                "train_loss_final": progress.last_loss})
    model_store.register_fine_tuned(fine_tuned, tm.root_base, settings.job_id, final_dir)
    return {"fine_tuned_model": fine_tuned, "checkpoint_dir": str(final_dir), "steps": run.plan.total_steps,
            "train_loss_first": progress.first_loss, "train_loss_final": progress.last_loss,
            "val_loss_best": progress.best[0] if progress.best else None, "train_tokens": trained_tokens,
            "train_runtime_s": round(loop_s, 4),
            "tokens_per_second": round(trained_tokens / loop_s, 2) if loop_s > 0 else None,
            "mode": card.mode}


def _unsharded_model(run: SFTRun, model_store: Any) -> Any:
    """The sharded weights gathered whole (a collective) into an unsharded copy of the model on rank 0; other
    ranks get the sharded model back."""
    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.common import load_policy, wrap_lora
    from synth_ai.backend.trainers import fsdp

    settings, tm = run.settings, run.model
    weights = fsdp.full_tensors(tm.trainable, run.dp)
    if not run.dp.main:
        return tm.model
    fresh = load_policy(model_store, settings.base_model, loading.Placement("cpu", tm.load_dtype))[0]
    return fsdp.unsharded_copy(wrap_lora(fresh, settings, run.runtime.vision) if settings.mode == "lora" else fresh,
                               weights)
