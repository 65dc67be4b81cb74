"""The policy being trained: loading (full or LoRA, from a base or fine-tuned id), GSPO updates on recorded
samples, checkpoints, and the final `rl:` model.

Dropout stays off (the model is kept in eval mode): the log-probs computed for training must equal the ones
recorded while sampling, so that the first update of an iteration is exactly on-policy (ratio 1).
Optimiser steps per iteration: one over all of the iteration's samples by default (fully on-policy: ratio 1). With
`max_accumulated_minibatch = m`, each step takes m x `gradient_accumulation_steps` samples, run m at a time; steps
after the first of an iteration are off-policy and GSPO's clip applies. Rows with images always run one per
forward pass (their gradients still accumulate into the same step). Under torchrun each rank computes its share
of every step and the gradients are summed across ranks before clipping (`rl.data_parallel`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from synth_ai.backend.trainers import distributed
from synth_ai.backend.trainers.rl.advantages import group_returns, turn_advantages
from synth_ai.backend.trainers.rl.rl_settings import RLSettings
from synth_ai.backend.trainers.rl.types import Rollout, Sample
from synth_ai.errors import InvalidInputError

DEFAULT_MICRO_BATCH = 64


@dataclass
class TrainStats:
    loss: float
    clip_fraction: float
    kl: float
    ratio_mean: float
    steps: int
    sequences: int
    ref_kl: float | None = None
    off_policy: dict[str, float] | None = None  # off_policy.OffPolicyStats.record() of the first step


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
    def __init__(self, settings: RLSettings, model_store: Any, workdir: Path) -> None:
        import torch

        from synth_ai.backend.ml import loading
        from synth_ai.backend.trainers.common import (imported_adapter_adjustment, is_imported_adapter, load_policy,
                                                      vision_base_folder, wrap_lora)

        self.settings = settings
        self.store = model_store
        self.workdir = workdir
        self.dp = distributed.current()  # one process, or this torchrun rank (rl.data_parallel)
        path = model_store.resolve(settings.model_id)
        base_folder = vision_base_folder(model_store, path)
        self.tiny = loading.is_tiny_folder(base_folder)
        loading.configure_threads(tiny=self.tiny)
        self.vision = loading.is_vision_folder(base_folder)
        where = loading.placement()
        self.use_bf16 = where.device == "cuda" and where.dtype == torch.bfloat16
        load_dtype = torch.bfloat16 if (self.use_bf16 and settings.mode == "lora") else torch.float32
        self.where = loading.Placement(where.device, load_dtype)
        self.dtype_name = "bf16" if self.use_bf16 else "fp32"
        torch.manual_seed(settings.seed)
        # LoRA mode continues an imported adapter as that adapter (as SFT does); full mode trains it merged
        self.continued_adapter = settings.mode == "lora" and is_imported_adapter(model_store, settings.model_id)
        model, self.tokenizer_path, self.root_base, self.from_lora = load_policy(
            model_store, settings.model_id, self.where, keep_adapter=self.continued_adapter)
        # the `rl.config.adjusted` event the loop reports: (message, data), or None
        self.adjustment = (imported_adapter_adjustment(settings.model_id, model, settings)
                           if self.continued_adapter else None)
        self.base_folder = base_folder
        self.tokenizer = loading.load_tokenizer(self.tokenizer_path)
        self.processor = None
        if self.vision:
            source = path if (Path(path) / "preprocessor_config.json").exists() else base_folder
            self.processor = loading.build_processor(self.tokenizer, loading.load_image_processor(source))
        self.reference = None
        if settings.reference:
            self.reference = copy.deepcopy(model).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)
        if settings.mode == "lora" and not self.continued_adapter:
            model = wrap_lora(model, settings, self.vision)
        model.eval()  # no dropout: see the module docstring
        self.model = model
        self.trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
        self.trainable_count = sum(p.numel() for p in self.trainable.values())
        self.decoder, self.lm_head = loading.core_parts(model)
        self.optimizer = torch.optim.AdamW(list(self.trainable.values()), lr=settings.learning_rate,
                                           betas=(0.9, 0.999), eps=1e-8, weight_decay=settings.weight_decay,
                                           foreach=True)  # one op per kind for all tensors: same values
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda _step: 1.0)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.image_pad = loading.special_token_id(self.tokenizer, "<|image_pad|>") if self.vision else None
        self.vision_dtype = next(self.decoder.visual.parameters()).dtype if self.vision else None
        # Under bf16 autocast the training forward differs from the sampler's numerics by more than GSPO's tiny
        # clip range; when the sampler holds the same weights, take the "old" log-probs from the training
        # forward itself (before the update) so that the on-policy ratio is 1 there too.
        self.recompute_old = self.use_bf16 and settings.weight_sync_interval == 1
        self.version = 0  # optimiser steps taken in this process: the policy version the engine is given

    def served(self) -> Any:
        from synth_ai.backend.inference.engine import describe_model

        return describe_model(self.settings.label or self.settings.model_id, Path(self.tokenizer_path), self.model,
                              self.tokenizer, vision=self.vision, processor=self.processor,
                              device=self.where.device)

    # Updates --------------------------------------------------------------------------------------------------
    def train(self, samples: list[Sample], after_step: Callable[[int], None] | None = None) -> TrainStats:
        """GSPO optimiser steps over `samples`; `self.version` counts the steps taken (the policy version that
        the rollout engine gets on `publish`). Asynchronous (`max_staleness` > 0): pi_old is the trainer's policy
        before the update (the first step's own forward, or a forward before it when there are several steps) and
        each sequence is weighted by its truncated importance weight against the sampler (`off_policy`).
        `after_step(version)` runs after each optimiser step (the loop publishes the weights there)."""
        import torch

        from synth_ai.backend.trainers.common import NullContext
        from synth_ai.backend.trainers.rl.batches import collate, completion_logprobs, micro_batches
        from synth_ai.backend.trainers.rl.data_parallel import gather, sum_values
        from synth_ai.backend.trainers.rl.gspo import gspo_loss
        from synth_ai.backend.trainers.rl.off_policy import OffPolicyStats

        s = self.settings
        dp = self.dp
        per_step = s.micro_batch * max(1, s.gradient_accumulation_steps) if s.micro_batch else len(samples)
        # under torchrun each rank takes its share of every step and divides by the step's global count
        steps = [samples[i:i + per_step] for i in range(0, len(samples), per_step)]
        mine = [dp.shard(step) for step in steps]
        autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if self.use_bf16 else NullContext()
        proximal_now = s.asynchronous and len(steps) == 1  # pi_old = this forward, detached
        if (self.recompute_old and not s.asynchronous) or (s.asynchronous and len(steps) > 1):
            self._recompute_old_logprobs([x for share in mine for x in share], autocast)
        total_loss = clipped = 0.0
        ratio_sum = kl_sum = ref_kl_sum = 0.0
        sequences = 0
        off = OffPolicyStats()
        for index, (step, share) in enumerate(zip(steps, mine)):
            count = len(step)
            for part in micro_batches(share, s.micro_batch or DEFAULT_MICRO_BATCH):
                batch = collate(part, self.pad_id, self.where.device)
                logp = completion_logprobs(self.decoder, self.lm_head, batch, image_pad=self.image_pad,
                                           vision_dtype=self.vision_dtype, autocast=autocast)
                ref = self._reference_logprobs(batch, autocast) if self.reference is not None else None
                old = logp.detach() if proximal_now else batch["old_logprobs"]
                loss_sum, stats = gspo_loss(logp, old, batch["mask"], batch["advantages"],
                                            eps_low=s.epsilon_low, eps_high=s.epsilon_high, ref_logp=ref,
                                            kl_coef=s.kl_coef, sampler_logp=batch["sampler_logprobs"],
                                            is_cap=s.importance_sampling_cap if s.asynchronous else None)
                (loss_sum / count).backward()
                total_loss += float(loss_sum.detach())
                clipped += stats.clipped
                ratio_sum += stats.ratio_sum
                kl_sum += stats.kl_sum
                ref_kl_sum += stats.ref_kl_sum
                sequences += stats.sequences
                if index == 0 and stats.off_policy is not None:  # before any update: sampler against trainer
                    off.add(stats.off_policy)
            dp.sum_grads(list(self.trainable.values()))
            if s.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(list(self.trainable.values()), s.max_grad_norm)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.version += 1
            if after_step is not None:
                after_step(self.version)
        total_loss, clipped, ratio_sum, kl_sum, ref_kl_sum, sequences, off.tokens, off.truncated_tokens, \
            off.mismatch_sum, off.sequences, off.ratio_sum = sum_values(
                dp, [total_loss, clipped, ratio_sum, kl_sum, ref_kl_sum, sequences, off.tokens, off.truncated_tokens,
                     off.mismatch_sum, off.sequences, off.ratio_sum])
        off.ratio_max = max(gather(dp, off.ratio_max))
        sequences = int(sequences)
        n = max(1, sequences)
        return TrainStats(loss=total_loss / n, clip_fraction=clipped / n, kl=kl_sum / n, ratio_mean=ratio_sum / n,
                          steps=len(steps), sequences=sequences,
                          ref_kl=ref_kl_sum / n if self.reference is not None else None,
                          off_policy=off.record() if off.tokens else None)

    def _recompute_old_logprobs(self, samples: list[Sample], autocast: Any) -> None:
        import torch

        from synth_ai.backend.trainers.rl.batches import collate, completion_logprobs, micro_batches

        with torch.no_grad():
            for part in micro_batches(samples, self.settings.micro_batch or DEFAULT_MICRO_BATCH):
                batch = collate(part, self.pad_id, self.where.device)
                logp = completion_logprobs(self.decoder, self.lm_head, batch, image_pad=self.image_pad,
                                           vision_dtype=self.vision_dtype, autocast=autocast).float().cpu()
                for row, sample in enumerate(part):
                    sample.old_logprobs = logp[row, :len(sample.completion_ids)].tolist()

    def _reference_logprobs(self, batch: dict[str, Any], autocast: Any) -> Any:
        import torch

        from synth_ai.backend.ml import loading
        from synth_ai.backend.trainers.rl.batches import completion_logprobs

        decoder, lm_head = loading.core_parts(self.reference)
        with torch.no_grad():
            return completion_logprobs(decoder, lm_head, batch, image_pad=self.image_pad,
                                       vision_dtype=self.vision_dtype, autocast=autocast)

    # Checkpoints ----------------------------------------------------------------------------------------------
    def checkpoint(self, iteration: int, history: list[dict[str, Any]], last_eval: float | None) -> Path | None:
        """Rank 0 writes the job's checkpoints (every rank holds the same weights); None on the others."""
        if not self.dp.main:
            return None
        from synth_ai.backend.trainers import checkpoints
        from synth_ai.backend.trainers.common import jsonable

        state = {"fingerprint": jsonable(self.settings.fingerprint()), "iteration": iteration,
                 "history": jsonable(history), "last_eval": last_eval}
        return checkpoints.save(self.workdir, iteration, trainable=self.trainable, optimizer=self.optimizer,
                                scheduler=self.scheduler, state=state)

    def resume(self, reporter: Any) -> dict[str, Any]:
        """Load the newest checkpoint of this job, if any; returns its state ({} when starting fresh)."""
        import torch

        from synth_ai.backend.trainers import checkpoints
        from synth_ai.backend.trainers.common import jsonable

        folder = checkpoints.latest(self.workdir)
        if folder is None:
            return {}
        saved = checkpoints.load(folder)
        if saved["state"].get("fingerprint") != jsonable(self.settings.fingerprint()):
            raise InvalidInputError(f"The checkpoint in {folder} was written with other settings; refusing to "
                                    "resume from it.", hint="Delete the job's checkpoints folder to start over.")
        missing = set(self.trainable) - set(saved["weights"])
        if missing:
            raise InvalidInputError(f"The checkpoint in {folder} lacks {len(missing)} trainable tensors.")
        with torch.no_grad():
            for name, param in self.trainable.items():
                param.copy_(saved["weights"][name].to(param.device, param.dtype))
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        checkpoints.restore_rng(saved["rng"])
        iteration = int(saved["state"]["iteration"])
        reporter.event("rl.train.resumed", f"Resumed from the checkpoint after iteration {iteration}.",
                       {"iteration": iteration, "checkpoint": str(folder)})
        return saved["state"]

    def save_final(self, history: list[dict[str, Any]], last_eval: float | None) -> str:
        from synth_ai.backend.trainers.common import save_final

        s = self.settings
        model = self.model
        mode = s.mode
        # adapters over a fine-tune: save the whole model; a continued imported adapter stays an adapter
        if s.mode == "lora" and s.model_id != self.root_base and not self.continued_adapter:
            model, mode = self.model.merge_and_unload(), "full"
        fine_tuned = f"rl:{self.root_base}:{s.job_id}"
        rewards = [h["reward_mean"] for h in history if h.get("reward_mean") is not None]
        card_settings = SimpleNamespace(base_model=self.root_base, job_id=s.job_id, mode=mode)
        final_dir = self.workdir / "final"
        save_final(model, self.tokenizer, self.base_folder, final_dir, card_settings, fine_tuned,
                   {"algorithm": "gspo", "source_model": s.model_id, "iterations": s.iterations,
                    "reward_first": rewards[0] if rewards else None,
                    "reward_last": rewards[-1] if rewards else None, "eval_mean_return": last_eval,
                    "reward_curve": [round(r, 4) for r in rewards if not math.isnan(r)]})
        self.store.register_fine_tuned(fine_tuned, self.root_base, s.job_id, final_dir)
        return fine_tuned
