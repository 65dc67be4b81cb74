"""An RL job's checkpoints and final model: a checkpoint of the trainable tensors, optimiser, schedule, RNG and the
iteration history (`trainers/checkpoints.py`'s layout), resuming from the newest one (refused when it was written
with other settings), and the final `rl:<root base>:<job>` model saved and registered.

A sharded policy (`[training] fsdp`) writes full tensors too, gathered to rank 0, with the optimiser state keyed by
parameter name (`trainers.fsdp.optimizer_state`): the same files resume on any number of sharded ranks, or in one
process (the name-keyed state loaded into the whole model). A checkpoint of an unsharded run (its optimiser state
keyed by position) resumes unsharded only."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from synth_ai.backend.trainers.common import jsonable
from synth_ai.backend.trainers.rl.policy import RLPolicy
from synth_ai.backend.trainers.rl.rl_settings import RLSettings
from synth_ai.errors import InvalidInputError


def save_checkpoint(workdir: Path, iteration: int, settings: RLSettings, policy: RLPolicy, optimizer: Any,
                    scheduler: Any, history: list[dict[str, Any]], last_eval: float | None, dp: Any) -> Path | None:
    """Rank 0 writes the checkpoint and returns its folder; None on the others (sharded: all gather first)."""
    from synth_ai.backend.trainers import checkpoints, fsdp

    sharded = policy.root is not None
    weights, optimizer_state = (fsdp.full_tensors(policy.trainable, dp), fsdp.optimizer_state(policy.root, optimizer)) \
        if sharded else (policy.trainable, None)  # gathering is a collective: every rank takes part
    if not dp.main:
        return None
    state = {"fingerprint": jsonable(settings.fingerprint()), "iteration": iteration,
             "history": jsonable(history), "last_eval": last_eval}
    return checkpoints.save(workdir, iteration, trainable=weights, optimizer=optimizer, scheduler=scheduler,
                            state=state, optimizer_state=optimizer_state)


def resume_checkpoint(workdir: Path, settings: RLSettings, policy: RLPolicy, optimizer: Any, scheduler: Any,
                      reporter: Any) -> dict[str, Any]:
    """Load the newest checkpoint of this job into the tensors, optimiser, schedule and RNG, if there is one;
    returns its state ({} when starting fresh)."""
    from synth_ai.backend.trainers import checkpoints

    folder = checkpoints.latest(workdir)
    if folder is None:
        return {}
    saved = checkpoints.load(folder)
    if saved["state"].get("fingerprint") != jsonable(settings.fingerprint()):
        raise InvalidInputError(f"The checkpoint in {folder} was written with other settings; refusing to "
                                "resume from it.", hint="Delete the job's checkpoints folder to start over.")
    missing = set(policy.trainable) - set(saved["weights"])
    if missing:
        raise InvalidInputError(f"The checkpoint in {folder} lacks {len(missing)} trainable tensors.")
    _restore(folder, policy, optimizer, saved)
    scheduler.load_state_dict(saved["scheduler"])
    checkpoints.restore_rng(saved["rng"])
    iteration = int(saved["state"]["iteration"])
    reporter.event("rl.train.resumed", f"Resumed from the checkpoint after iteration {iteration}.",
                   {"iteration": iteration, "checkpoint": str(folder)})
    return saved["state"]


def _restore(folder: Path, policy: RLPolicy, optimizer: Any, saved: dict[str, Any]) -> None:
    """The weights and optimiser state into the policy: sharded (scattered), or whole (see the module doc)."""
    import torch

    from synth_ai.backend.trainers import fsdp

    by_name = any(isinstance(key, str) for key in saved["optimizer"].get("state", {}))
    if policy.root is not None:
        if not by_name and saved["optimizer"].get("state"):
            raise InvalidInputError(f"The checkpoint in {folder} was written by an unsharded run; a sharded run "
                                    "cannot read its optimiser state.",
                                    hint="Resume it with [training] fsdp = false, or delete the job's checkpoints "
                                         "folder to start over sharded.")
        fsdp.restore(policy.root, optimizer, policy.trainable, saved["weights"], saved["optimizer"])
        return
    with torch.no_grad():
        for name, param in policy.trainable.items():
            param.copy_(saved["weights"][name].to(param.device, param.dtype))
    if not by_name:
        optimizer.load_state_dict(saved["optimizer"])
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    from synth_ai.backend.trainers.rl.sharded_policy import CompletionLogprobs

    # keyed by the names under a sharded run's root: the same root around the whole model, unsharded
    root = CompletionLogprobs(policy.model, policy.decoder, policy.lm_head, image_pad=None, vision_dtype=None)
    set_optimizer_state_dict(root, optimizer, optim_state_dict=saved["optimizer"],
                             options=StateDictOptions(full_state_dict=True))


def save_final_model(policy: RLPolicy, workdir: Path, model_store: Any, history: list[dict[str, Any]],
                     last_eval: float | None, *, model: Any = None) -> str:
    """The trained policy (or `model`, a sharded run's gathered copy of it) saved as `<workdir>/final` with its card
    and registered; returns its `rl:` id. LoRA over a fine-tune is saved merged (a whole model); a continued imported
    adapter stays an adapter."""
    from synth_ai.backend.trainers.common import save_final

    s = policy.settings
    model = policy.model if model is None else model
    mode = s.mode
    if s.mode == "lora" and s.model_id != policy.root_base and not policy.continued_adapter:
        model, mode = model.merge_and_unload(), "full"
    fine_tuned = f"rl:{policy.root_base}:{s.job_id}"
    rewards = [h["reward_mean"] for h in history if h.get("reward_mean") is not None]
    card_settings = SimpleNamespace(base_model=policy.root_base, job_id=s.job_id, mode=mode)
    final_dir = workdir / "final"
    save_final(model, policy.tokenizer, policy.runtime.base_path, final_dir, card_settings, fine_tuned,
               {"algorithm": "gspo", "source_model": s.model_id, "iterations": s.iterations,
                "reward_first": rewards[0] if rewards else None,
                "reward_last": rewards[-1] if rewards else None, "eval_mean_return": last_eval,
                "reward_curve": [round(r, 4) for r in rewards if not math.isnan(r)]})
    model_store.register_fine_tuned(fine_tuned, policy.root_base, s.job_id, final_dir)
    return fine_tuned
