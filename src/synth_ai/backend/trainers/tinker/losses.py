"""The Tinker SDK's built-in losses, per datum, as the SDK documents them: `token_losses` gives each target token's
loss (the datum's loss is their sum; a request's is the sum over its datums, never a mean, which
`forward_backward_custom` relies on).

Notation, per target token: lp = its log-prob under the current weights (the gradient flows through it only),
q = the `logprobs` input (the sampler's), A = `advantages`, r = exp(lp - q). Clip thresholds bound the ratio
itself (0.8 and 1.2, not 0.2); a per-token `clip_*_threshold` input takes precedence over `loss_fn_config`, which
takes precedence over the defaults (`config.tinker_settings.LOSS_CONFIG`).
- cross_entropy: -lp * weights (weights default to 1; [tokens, K] targets score K tokens per position);
- importance_sampling: -r * A;
- ppo: -min(r * A, clip(r, low, high) * A);
- cispo: -sg(clip(r, low, high)) * lp * A (defaults: 0 and 4, a one-sided clip);
- dro: -(lp * A - beta / 2 * (lp - q)^2) (beta defaults to 0.05);
- gspo (the token-level form): every token carries the sequence's ratio s = exp(mean over the masked tokens of
  (lp - q)) with its own lp's gradient, then PPO's clipped objective. The mask is `sequence_ratio_mask`; without
  it, the tokens with a sampler log-prob or an advantage (the sampled ones, in the cookbook's data).
"""

from __future__ import annotations

from typing import Any

import torch

from synth_ai.config.tinker_settings import LOSS_CONFIG


def token_losses(loss_fn: str, logprobs: Any, inputs: dict[str, Any], config: dict[str, Any]) -> Any:
    def column(name: str, default: float | None = None) -> Any:
        if name not in inputs:
            return None if default is None else torch.full_like(logprobs, default)
        values = torch.tensor(inputs[name]["values"], dtype=torch.float32, device=logprobs.device)
        return values.view(logprobs.shape)

    settings = {**LOSS_CONFIG.get(loss_fn, {}), **config}

    def bound(name: str) -> Any:
        given = column(name)
        return given if given is not None else torch.full_like(logprobs, float(settings[name]))

    if loss_fn == "cross_entropy":
        return -logprobs * column("weights", 1.0)
    sampled, advantages = column("logprobs"), column("advantages")
    if loss_fn == "importance_sampling":
        return -torch.exp(logprobs - sampled) * advantages
    if loss_fn == "dro":
        return -(logprobs * advantages - 0.5 * float(settings["beta"]) * (logprobs - sampled) ** 2)
    low, high = bound("clip_low_threshold"), bound("clip_high_threshold")
    if loss_fn == "cispo":
        clipped = torch.minimum(torch.maximum(torch.exp(logprobs - sampled), low), high).detach()
        return -clipped * logprobs * advantages
    if loss_fn == "ppo":
        ratio = torch.exp(logprobs - sampled)
    elif loss_fn == "gspo":
        ratio = _sequence_ratio(logprobs, sampled, advantages, column("sequence_ratio_mask"))
    else:
        raise ValueError(f"no loss named {loss_fn!r}")  # the API refuses unknown losses before they get here
    clipped = torch.minimum(torch.maximum(ratio, low), high)
    return -torch.minimum(ratio * advantages, clipped * advantages)


def _sequence_ratio(logprobs: Any, sampled: Any, advantages: Any, mask: Any) -> Any:
    """GSPO-token's ratio: the sequence ratio's value on every token, with that token's own gradient."""
    chosen = mask != 0 if mask is not None else (sampled != 0) | (advantages != 0)
    detached = logprobs.detach()
    log_ratio = (detached - sampled)[chosen].mean() if bool(chosen.any()) else detached.new_zeros(())
    return torch.exp(log_ratio + logprobs - detached)
