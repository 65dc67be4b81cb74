"""The GSPO loss (Group Sequence Policy Optimization), sequence level.

For sequence i with completion tokens t = 1..n_i, log-probs under the current policy `logp` and under the policy
that sampled it `old`:

    s_i = exp( (1/n_i) * sum_t (logp_it - old_it) )              # length-normalised importance ratio
    L_i = -min( s_i * A_i, clip(s_i, 1 - eps_low, 1 + eps_high) * A_i )

plus, when a reference model is configured, kl_coef * KL_i with the per-token k3 estimator
exp(ref - logp) - (ref - logp) - 1 averaged over the sequence. `gspo_loss` returns the SUM of L_i over the batch
(the caller divides by the number of sequences in the whole optimiser step, so gradient accumulation gives the
same gradient as one big batch) and per-batch statistics.

Asynchronous GSPO (`max_staleness` > 0) passes the sampler's recorded log-probs and the truncated-IS cap: `old` is
then the trainer's own policy before the step (pi_old), and each sequence's term is weighted by its truncated
importance weight min(pi_old / mu, C) (`off_policy`). Without a cap the loss is the synchronous one, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synth_ai.backend.trainers.rl.off_policy import OffPolicyStats, mismatch, truncated_weights


@dataclass
class LossStats:
    sequences: int
    clipped: int
    ratio_sum: float
    kl_sum: float  # KL(sampling || current), k3 estimator, summed over sequences
    ref_kl_sum: float
    off_policy: OffPolicyStats | None = None  # against the sampler's log-probs, when they were given


def gspo_loss(logp: Any, old_logp: Any, mask: Any, advantages: Any, *, eps_low: float, eps_high: float,
              ref_logp: Any = None, kl_coef: float = 0.0, sampler_logp: Any = None,
              is_cap: float | None = None) -> tuple[Any, LossStats]:
    import torch

    token_w = off = None
    if is_cap is not None:
        token_w, seq_w, off = truncated_weights(old_logp, sampler_logp, mask, is_cap)
    elif sampler_logp is not None:
        off = mismatch(logp, sampler_logp, mask)  # the trainer's weights now against the sampler's
    mask = mask.to(logp.dtype)
    lengths = mask.sum(dim=1).clamp(min=1.0)
    log_ratio = ((logp - old_logp) * mask).sum(dim=1) / lengths
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_sequence = -torch.minimum(ratio * advantages, clipped * advantages)
    if token_w is not None:
        per_sequence = per_sequence * seq_w.to(per_sequence.dtype)
    ref_kl_sum = 0.0
    if ref_logp is not None and kl_coef > 0:
        delta = ref_logp - logp
        token_kl = (torch.exp(delta) - delta - 1.0) * mask
        if token_w is not None:
            token_kl = token_kl * token_w.to(token_kl.dtype)
        seq_kl = token_kl.sum(dim=1) / lengths
        per_sequence = per_sequence + kl_coef * seq_kl
        ref_kl_sum = float(seq_kl.detach().sum())
    with torch.no_grad():
        outside = (ratio < 1.0 - eps_low) | (ratio > 1.0 + eps_high)
        back = (old_logp - logp) * mask  # log(old / current) per token
        sampling_kl = ((torch.exp(-back) - 1.0 + back) * mask).sum(dim=1) / lengths
    stats = LossStats(sequences=int(ratio.shape[0]), clipped=int(outside.sum()), ratio_sum=float(ratio.detach().sum()),
                      kl_sum=float(sampling_kl.sum()), ref_kl_sum=ref_kl_sum, off_policy=off)
    return per_sequence.sum(), stats
