"""A frozen copy of a model in memory, for a second reader of its weights (the RL reference, a rollout engine's
sampling copy), made in its final dtype and device tensor by tensor: a bf16 copy of an fp32 model never holds a
second fp32 model, even for a moment."""

from __future__ import annotations

import copy
from typing import Any


def frozen_copy(model: Any, *, device: Any = None, dtype: Any = None) -> Any:
    """`model`'s structure with its floating parameters cast to `dtype` (None: each keeps its own) on `device`
    (None: each stays where it is), frozen (no gradient) and in eval mode. Each parameter is made in its final form
    first and handed to deepcopy through its memo; tied weights are one parameter, so they stay tied."""
    import torch

    memo: dict[int, Any] = {}
    for param in model.parameters():
        if id(param) not in memo:
            target = dtype if dtype is not None and param.is_floating_point() else param.dtype
            memo[id(param)] = torch.nn.Parameter(
                param.detach().to(device=device or param.device, dtype=target, copy=True), requires_grad=False)
    clone = copy.deepcopy(model, memo)
    if device is not None:
        clone.to(device)  # the buffers (rotary frequencies); the parameters are there already
    clone.eval()
    for param in clone.parameters():
        param.requires_grad_(False)
    return clone
