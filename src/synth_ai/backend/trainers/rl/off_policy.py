"""Off-policy correction for asynchronous GSPO: truncated importance sampling between the policy that sampled a
completion (the rollout engine's weights, version v) and the trainer's policy at the start of the update.

For completion token t of sequence i, with `sampler` = log mu(y_t) recorded while sampling and `proximal` = log
pi_old(y_t) under the trainer's weights before this optimiser step (no gradient):

    log w_it = proximal_it - sampler_it                      # per token, kept in log space
    w_it     = exp(min(log w_it, log C))                     # = min(w_it, C): truncated, never overflows
    w_i      = exp(min((1/n_i) * sum_t log w_it, log C))     # per sequence, length-normalised like GSPO's ratio

The GSPO term of sequence i is multiplied by w_i (its ratio is sequence-level, so is its correction); the per-token
k3 KL to a reference model is multiplied by w_it. Both are constants in the gradient. Everything is a sum of
log-probs, so a long thinking trace (thousands of tokens, each log-prob near -5) never underflows: the product of
its probabilities is never formed.

`mismatch_kl` is the k3 estimate of KL(mu || pi_old) on the sampled tokens: with r = pi_old / mu = exp(log w),
k3 = r - 1 - log r >= 0, averaged over tokens. With `max_staleness = 0` the two policies hold the same weights
and it measures only the numerical gap between the engine and the trainer (sampling kernels, bf16).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

K3_LOG_CLAMP = 20.0  # the mismatch metric's log-ratios are clamped here before exp (a metric, not the loss)


@dataclass
class OffPolicyStats:
    """Sums over a batch (the trainer divides by the counts over the whole update)."""

    tokens: int = 0
    truncated_tokens: int = 0
    mismatch_sum: float = 0.0  # k3 summed over tokens
    sequences: int = 0
    ratio_sum: float = 0.0  # untruncated sequence-level IS ratio, summed
    ratio_max: float = 0.0

    def add(self, other: OffPolicyStats) -> None:
        self.tokens += other.tokens
        self.truncated_tokens += other.truncated_tokens
        self.mismatch_sum += other.mismatch_sum
        self.sequences += other.sequences
        self.ratio_sum += other.ratio_sum
        self.ratio_max = max(self.ratio_max, other.ratio_max)

    def record(self) -> dict[str, float]:
        """The iteration record's fields (`iteration_report`)."""
        return {"mismatch_kl": self.mismatch_sum / max(1, self.tokens),
                "is_ratio_mean": self.ratio_sum / max(1, self.sequences), "is_ratio_max": self.ratio_max,
                "is_truncated_frac": self.truncated_tokens / max(1, self.tokens)}


def mismatch(proximal: Any, sampler: Any, mask: Any) -> OffPolicyStats:
    """The k3 KL(mu || pi_old) and the untruncated ratios of a batch, without any weight (see the module doc)."""
    import torch

    with torch.no_grad():
        mask = mask.to(torch.float64)
        log_w = (proximal.detach().double() - sampler.double()) * mask
        clamped = log_w.clamp(-K3_LOG_CLAMP, K3_LOG_CLAMP)
        k3 = ((torch.exp(clamped) - 1.0 - clamped) * mask).sum()
        lengths = mask.sum(dim=1).clamp(min=1.0)
        seq_ratio = torch.exp((log_w.sum(dim=1) / lengths).clamp(max=K3_LOG_CLAMP))
        return OffPolicyStats(tokens=int(mask.sum()), mismatch_sum=float(k3), sequences=int(mask.shape[0]),
                              ratio_sum=float(seq_ratio.sum()),
                              ratio_max=float(seq_ratio.max()) if seq_ratio.numel() else 0.0)


def truncated_weights(proximal: Any, sampler: Any, mask: Any, cap: float) -> tuple[Any, Any, OffPolicyStats]:
    """(per-token weights [rows, tokens], per-sequence weights [rows], stats): min(w, cap) taken in log space."""
    import torch

    if not cap > 0:
        raise ValueError(f"the importance sampling cap must be positive (found {cap!r})")
    with torch.no_grad():
        fmask = mask.to(torch.float32)
        log_w = (proximal.detach().float() - sampler.float()) * fmask
        log_cap = math.log(cap)
        token_w = torch.exp(log_w.clamp(max=log_cap)) * fmask
        lengths = fmask.sum(dim=1).clamp(min=1.0)
        seq_w = torch.exp((log_w.sum(dim=1) / lengths).clamp(max=log_cap))
        stats = mismatch(proximal, sampler, mask)
        stats.truncated_tokens = int(((log_w > log_cap) & (fmask > 0)).sum())
    return token_w, seq_w, stats
