"""The GSPO update: optimiser steps over an iteration's samples, a function of the samples, the policy's parts and
the optimiser (no state of its own), as prime-rl's `loss.py` keeps the loss apart from the trainer.

Optimiser steps per iteration: one over all of the iteration's samples by default (fully on-policy: ratio 1). With
`max_accumulated_minibatch = m`, each step takes m x `gradient_accumulation_steps` samples, run m at a time; steps
after the first of an iteration are off-policy and GSPO's clip applies. A forward/backward also holds at most
`micro_batch_tokens` padded tokens (`batches.micro_batches`); every micro-batch's loss is divided by its step's
sequence count, so the split never changes the step's gradient. Rows with images always run one per
forward pass (their gradients still accumulate into the same step). Under torchrun each rank computes its share
of every step and the gradients are summed across ranks before clipping (`rl.data_parallel`); sharded
(`[training] fsdp`), FSDP's backward sums them and every rank runs as many passes (`rl.sharded_policy`).

Asynchronous (`max_staleness` > 0): pi_old is the policy before the update (the first step's own forward, or a
forward before it when there are several steps) and each sequence is weighted by its truncated importance weight
against the sampler (`off_policy`). Under bf16 autocast the training forward differs from the sampler's numerics by
more than GSPO's clip range; `recompute_old` takes the "old" log-probs from the training forward itself (before the
update) so that the on-policy ratio is 1 there too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from synth_ai.backend.trainers.rl.policy import RLPolicy
from synth_ai.backend.trainers.rl.rl_settings import RLSettings
from synth_ai.backend.trainers.rl.types import Sample

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


@dataclass
class _Sums:
    """What the micro-batches add up, summed across ranks at the end."""

    loss: float = 0.0
    clipped: float = 0.0
    ratio: float = 0.0
    kl: float = 0.0
    ref_kl: float = 0.0
    sequences: float = 0.0


def gspo_update(samples: list[Sample], policy: RLPolicy, optimizer: Any, scheduler: Any, settings: RLSettings, dp: Any,
                *, recompute_old: bool, on_step: Callable[[], None] | None = None) -> TrainStats:
    """GSPO optimiser steps over `samples` with `policy`'s parts (`rl.policy.RLPolicy`: decoder, LM head, trainable
    parameters, reference); `on_step()` runs after each optimiser step (the trainer counts versions there)."""
    import torch

    from synth_ai.backend.trainers.common import NullContext
    from synth_ai.backend.trainers.rl.data_parallel import gather, sum_values
    from synth_ai.backend.trainers.rl.off_policy import OffPolicyStats

    s = settings
    per_step = s.micro_batch * max(1, s.gradient_accumulation_steps) if s.micro_batch else len(samples)
    # under torchrun each rank takes its share of every step and divides by the step's global count
    steps = [samples[i:i + per_step] for i in range(0, len(samples), per_step)]
    mine = [dp.shard(step) for step in steps]
    use_bf16 = policy.runtime.use_bf16
    autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if use_bf16 else NullContext()
    proximal_now = s.asynchronous and len(steps) == 1  # pi_old = this forward, detached
    if (recompute_old and not s.asynchronous) or (s.asynchronous and len(steps) > 1):
        recompute_old_logprobs(policy, [x for share in mine for x in share], settings, autocast, filler=samples[0])
    sums = _Sums()
    off = OffPolicyStats()
    trainable = list(policy.trainable.values())
    for index, (step, share) in enumerate(zip(steps, mine)):
        _accumulate_step(policy, share, step, settings, autocast, proximal_now, sums,
                         off if index == 0 else None)
        if policy.root is None:  # sharded, FSDP's backward has reduce-scattered them already (as a sum)
            dp.sum_grads(trainable)
        if s.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(trainable, s.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if on_step is not None:
            on_step()
    total_loss, clipped, ratio_sum, kl_sum, ref_kl_sum, sequences, off.tokens, off.truncated_tokens, \
        off.mismatch_sum, off.sequences, off.ratio_sum = sum_values(
            dp, [sums.loss, sums.clipped, sums.ratio, sums.kl, sums.ref_kl, sums.sequences, off.tokens,
                 off.truncated_tokens, off.mismatch_sum, off.sequences, off.ratio_sum])
    off.ratio_max = max(gather(dp, off.ratio_max))
    sequences = int(sequences)
    n = max(1, sequences)
    return TrainStats(loss=total_loss / n, clip_fraction=clipped / n, kl=kl_sum / n, ratio_mean=ratio_sum / n,
                      steps=len(steps), sequences=sequences,
                      ref_kl=ref_kl_sum / n if policy.reference is not None else None,
                      off_policy=off.record() if off.tokens else None)


def _accumulate_step(policy: RLPolicy, share: list[Sample], step: list[Sample], settings: RLSettings, autocast: Any,
                     proximal_now: bool, sums: _Sums, off: Any) -> None:
    """The gradients of this rank's `share` of one optimiser `step`, micro-batch by micro-batch;
    `off` (the first step only) collects the sampler-against-trainer statistics before any update."""
    from synth_ai.backend.trainers.rl.batches import collate
    from synth_ai.backend.trainers.rl.gspo import gspo_loss

    s, count = settings, len(step)
    for part, weight in _passes(plan_micro_batches(share, s), step[0], policy):
        batch = collate(part, policy.pad_id, policy.runtime.where.device)
        logp = policy.logprobs(batch, autocast, chunked=s.chunked_logprobs)
        ref = (reference_logprobs(policy, batch, autocast, chunked=s.chunked_logprobs)
               if policy.reference is not None else None)
        old = logp.detach() if proximal_now else batch["old_logprobs"]
        loss_sum, stats = gspo_loss(logp, old, batch["mask"], batch["advantages"],
                                    eps_low=s.epsilon_low, eps_high=s.epsilon_high, ref_logp=ref,
                                    kl_coef=s.kl_coef, sampler_logp=batch["sampler_logprobs"],
                                    is_cap=s.importance_sampling_cap if s.asynchronous else None)
        (loss_sum * weight / count).backward()
        if not weight:  # a sharded rank's filler pass (`sharded_policy.equal_passes`): counted nowhere
            continue
        sums.loss += float(loss_sum.detach())
        sums.clipped += stats.clipped
        sums.ratio += stats.ratio_sum
        sums.kl += stats.kl_sum
        sums.ref_kl += stats.ref_kl_sum
        sums.sequences += stats.sequences
        if off is not None and stats.off_policy is not None:  # before any update: sampler against trainer
            off.add(stats.off_policy)


def _passes(parts: list[list[Sample]], filler: Sample, policy: RLPolicy) -> list[tuple[list[Sample], float]]:
    """(micro-batch, weight) pairs to run; sharded, as many on every rank (`sharded_policy.equal_passes`), `filler`
    repeated on a rank with none."""
    if policy.root is None:
        return [(part, 1.0) for part in parts]
    from synth_ai.backend.trainers import distributed
    from synth_ai.backend.trainers.rl.sharded_policy import equal_passes

    return equal_passes(parts, filler, distributed.current())


def recompute_old_logprobs(policy: RLPolicy, samples: list[Sample], settings: RLSettings, autocast: Any, *,
                           filler: Sample | None = None) -> None:
    """Each sample's `old_logprobs` from the policy's forward now (no gradient)."""
    import torch

    from synth_ai.backend.trainers.rl.batches import collate

    with torch.no_grad():
        for part, weight in _passes(plan_micro_batches(samples, settings), filler or (samples[0] if samples else None),
                                    policy):
            batch = collate(part, policy.pad_id, policy.runtime.where.device)
            logp = policy.logprobs(batch, autocast, chunked=settings.chunked_logprobs).float().cpu()
            if not weight:
                continue
            for row, sample in enumerate(part):
                sample.old_logprobs = logp[row, :len(sample.completion_ids)].tolist()


def plan_micro_batches(samples: list[Sample], settings: RLSettings) -> list[list[Sample]]:
    """Both limits: `max_accumulated_minibatch` samples (64 unset) and `micro_batch_tokens` tokens."""
    from synth_ai.backend.trainers.rl.batches import micro_batches

    return micro_batches(samples, settings.micro_batch or DEFAULT_MICRO_BATCH, settings.micro_batch_tokens)


def reference_logprobs(policy: RLPolicy, batch: dict[str, Any], autocast: Any, *, chunked: bool = True) -> Any:
    # rl.reference: the adapter off, or a frozen copy
    return policy.reference.logprobs(policy, batch, autocast, chunked=chunked)
