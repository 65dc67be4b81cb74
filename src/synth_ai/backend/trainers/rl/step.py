"""One RL job's trainer: the policy (`rl.policy`, loaded by the runtime shared with SFT), its AdamW optimiser
(`trainers.optimizer`, shared with SFT) and the policy version, the GSPO update (`rl.update`, a function of the
samples and the policy) and the checkpoints (`rl.rl_checkpoints`); and `build_samples`, which turns an
iteration's rollouts into the samples GSPO trains.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from synth_ai.backend.trainers import distributed
from synth_ai.backend.trainers.optimizer import build_adamw
from synth_ai.backend.trainers.rl.advantages import group_returns, turn_advantages
from synth_ai.backend.trainers.rl.policy import RLPolicy
from synth_ai.backend.trainers.rl.rl_checkpoints import resume_checkpoint, save_checkpoint, save_final_model
from synth_ai.backend.trainers.rl.rl_settings import RLSettings
from synth_ai.backend.trainers.rl.types import Rollout, Sample
from synth_ai.backend.trainers.rl.update import TrainStats, gspo_update


def build_samples(rollouts: list[Rollout], settings: RLSettings | None = None) -> tuple[list[Sample], dict[str, int]]:
    """Samples of every LLM call of every successful rollout in a group with reward variance, in a fixed order.
    With `settings`, each rollout's `reward` becomes its blended episode return (`advantages.group_returns`);
    without, the rollouts' rewards are taken as they are. With per-turn returns,
    LLM call k of an episode takes turn k's advantage when the episode has one call per step; otherwise (counted in
    `turns_unmatched`) all its calls take turn 0's, the whole episode's."""
    per_turn = bool(settings and settings.step_rewards.active)
    groups: dict[int, list[Rollout]] = {}
    for r in rollouts:
        if r.ok:
            groups.setdefault(r.seed, []).append(r)
    samples: list[Sample] = []
    counts = {"groups": len(groups), "groups_zero_variance": 0, **({"turns_unmatched": 0} if per_turn else {})}
    for seed in sorted(groups):
        members = sorted(groups[seed], key=lambda r: r.index)
        if settings is None:  # rewards already final (set by the caller)
            returns = [[float(r.reward)] for r in members]
        else:
            returns = group_returns(members, settings.rubric_weights, settings.judge, per_turn)
            for rollout, row in zip(members, returns):
                rollout.reward = row[0]
        advantages = turn_advantages(returns)
        if advantages is None:
            counts["groups_zero_variance"] += 1
            continue
        for rollout, row in zip(members, advantages):
            if len(row) > 1 and len(row) != len(rollout.calls):
                counts["turns_unmatched"] += 1
                row = row[:1]
            for call in rollout.calls:
                advantage = row[min(call.index, len(row) - 1)] if len(row) > 1 else row[0]
                if advantage is None:
                    continue
                for sampled in call.samples:
                    if not sampled.completion_ids:
                        continue
                    samples.append(Sample(prompt_ids=list(sampled.prompt_ids),
                                          completion_ids=list(sampled.completion_ids),
                                          old_logprobs=list(sampled.logprobs), advantage=advantage,
                                          temperature=sampled.temperature or 1.0,
                                          vision_inputs=dict(sampled.vision_inputs), seed=seed,
                                          rollout_index=rollout.index, turn=call.index,
                                          forced=list(getattr(sampled, "forced", [])),
                                          sampler_logprobs=list(sampled.logprobs),
                                          versions=list(getattr(sampled, "versions", [])),
                                          adapter_version=getattr(sampled, "adapter_version", None)))
    counts["samples"] = len(samples)
    return samples, counts


class GSPOTrainer:
    """The policy being trained, its optimiser and its version (the optimiser steps taken in this process, which the
    rollout engine is given on `publish`). The policy's parts the loop, the engines and the tests read are named
    here too."""

    def __init__(self, settings: RLSettings, model_store: Any, workdir: Path) -> None:
        import torch

        self.settings = settings
        self.store = model_store
        self.workdir = workdir
        self.dp = distributed.current()  # one process, or this torchrun rank (rl.data_parallel)
        self.sharded = settings.fsdp if self.dp.enabled else None  # FSDP over the ranks (rl.sharded_policy)
        # a sharded policy is loaded on the CPU: fully_shard moves each rank's shards to its GPU
        policy = self.policy = RLPolicy(settings, model_store, load_device="cpu" if self.sharded else None)
        self.serving_model = self._shard() if self.sharded else None  # the engine's unsharded copy
        # how the engine's served model gets the current weights: sharded, gathered into its copy; None: the engine
        # reads the trainer's model itself
        self.weight_source: Callable[[Any], None] | None = self._gather if self.sharded else None
        self.model, self.tokenizer, self.processor = policy.model, policy.tokenizer, policy.processor
        self.trainable, self.decoder, self.lm_head, self.pad_id = (policy.trainable, policy.decoder, policy.lm_head,
                                                                   policy.pad_id)
        self.root_base, self.adjustment, self.where = policy.root_base, policy.adjustment, policy.where
        self.use_bf16, self.dtype_name = policy.runtime.use_bf16, policy.runtime.dtype_name
        self.vision, self.trainable_count = policy.runtime.vision, policy.trainable_count
        self.activation_checkpointing = policy.activation_checkpointing
        self.optimizer = build_adamw(self.trainable.values(), lr=settings.learning_rate,
                                     weight_decay=settings.weight_decay, device=policy.runtime.where.device,
                                     states=settings.optimizer_states, sharded=bool(self.sharded))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda _step: 1.0)
        # bf16: when the sampler holds the same weights, the "old" log-probs come from the training forward
        # (`rl.update`), so that the on-policy ratio is 1 there too
        self.recompute_old = self.use_bf16 and settings.weight_sync_interval == 1
        self.version = 0

    def _shard(self) -> Any:
        """Shard the policy (`rl.sharded_policy`); returns the unsharded copy the rollout engine samples from."""
        from synth_ai.backend.trainers.rl.sharded_policy import serving_copy, shard_policy
        from synth_ai.backend.trainers.runtime import sampling_dtype

        policy = self.policy
        if policy.reference is not None and policy.reference.kind == "adapter_start":
            from synth_ai.errors import InvalidInputError

            raise InvalidInputError(
                "[training].fsdp with a KL reference of a continued imported adapter is not supported: its starting "
                "adapter tensors are swapped in whole, and sharded parameters hold only a shard.",
                hint="Remove [training].fsdp (the adapter is small: data-parallel ranks hold it whole), or set "
                     "[training].kl_coef = 0.", details={"field": "data.config.training.fsdp"})
        served = serving_copy(policy.model, policy.runtime.where.device,
                              sampling_dtype(self.settings.mode, policy.runtime.use_bf16))
        policy.root = shard_policy(policy, self.dp, self.sharded)
        return served

    def _gather(self, model: Any) -> None:
        """The sharded trainable tensors gathered whole into `model` (the engine's copy; every rank: a collective)."""
        from synth_ai.backend.trainers.rl.sharded_policy import gather_into

        gather_into(self.trainable, model)

    def served(self) -> Any:
        return self.policy.served(self.serving_model)

    def train(self, samples: list[Sample], after_step: Callable[[int], None] | None = None) -> TrainStats:
        """GSPO optimiser steps over `samples` (`rl.update.gspo_update`); `after_step(version)` runs after each
        optimiser step (the loop publishes the weights there)."""
        def stepped() -> None:
            self.version += 1
            if after_step is not None:
                after_step(self.version)

        return gspo_update(samples, self.policy, self.optimizer, self.scheduler, self.settings, self.dp,
                           recompute_old=self.recompute_old, on_step=stepped)

    def checkpoint(self, iteration: int, history: list[dict[str, Any]], last_eval: float | None) -> Path | None:
        """Rank 0 writes the job's checkpoints; None on the others (sharded, every rank gathers its shards first)."""
        return save_checkpoint(self.workdir, iteration, self.settings, self.policy, self.optimizer, self.scheduler,
                               history, last_eval, self.dp)

    def resume(self, reporter: Any) -> dict[str, Any]:
        """The newest checkpoint of this job loaded, if any; its state ({} when starting fresh). Sharded, the
        engine's copy gets the resumed weights too."""
        state = resume_checkpoint(self.workdir, self.settings, self.policy, self.optimizer, self.scheduler, reporter)
        if state and self.serving_model is not None:
            self._gather(self.serving_model)
        return state

    def save_final(self, history: list[dict[str, Any]], last_eval: float | None) -> str:
        """Rank 0 saves the final model and returns its id; every rank calls it (sharded, the weights are gathered
        into the unsharded copy first)."""
        if self.serving_model is None:
            return save_final_model(self.policy, self.workdir, self.store, history, last_eval) if self.dp.main \
                else f"rl:{self.root_base}:{self.settings.job_id}"
        final = self.serving_model.to(self.where.dtype)  # the engine is closed: its copy becomes the final model
        self._gather(final)
        if not self.dp.main:
            return f"rl:{self.root_base}:{self.settings.job_id}"
        return save_final_model(self.policy, self.workdir, self.store, history, last_eval, model=final)
