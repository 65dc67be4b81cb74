"""Activation checkpointing: a decoder layer keeps only its input for backward and runs again there to rebuild the
rest (torch's non-reentrant checkpoint), for SFT and for the RL update.

Two switches over the same layers (`decoder_layers`), because the trainers call their models differently:
- SFT trains in train mode with no KV cache: transformers' own `gradient_checkpointing_enable` (`for_train_mode`).
- The RL policy stays in eval mode (no dropout: the on-policy ratio must be exactly 1) and its shared-prompt forward
  runs the completions on the prompt's KV cache (`rl.shared_prompts`). transformers' switch acts only while a layer's
  `training` flag is set, and then drops the cache it is given, so it would do nothing here (and, in train mode,
  break the shared layout). `in_eval_mode` wraps each layer's forward in the checkpoint itself, whatever the mode,
  and only while autograd records: a forward under `no_grad` (the old / behaviour recompute, the reference) runs as
  before and pays nothing. The caches the RL update hands these layers give the same keys and values when a layer
  runs again in backward (`rl.shared_prompts`).

Non-reentrant in both cases: gradients reach LoRA weights although the layers' (frozen) inputs need no grad, and
tensors a layer reads from outside its arguments (the prompt's cached keys) still receive their gradients.
"""

from __future__ import annotations

import types
from typing import Any


def decoder_layers(decoder: Any) -> Any:
    """The decoder layers (Qwen3's `model.layers`; Qwen3-VL's text layers are under `language_model`)."""
    return decoder.layers if hasattr(decoder, "layers") else decoder.language_model.layers


def for_train_mode(model: Any) -> None:
    """transformers' gradient checkpointing, which acts while the model is in train mode (SFT)."""
    if hasattr(model, "activation_checkpointing_enable"):  # the name transformers gives it after 5.19
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False


def in_eval_mode(decoder: Any) -> int:
    """Checkpoint every decoder layer of `decoder` whatever its train/eval mode; returns how many layers."""
    layers = list(decoder_layers(decoder))
    for layer in layers:
        # an instance attribute: the parameter names stay as they are, and a deep copy binds its own layer
        layer.forward = types.MethodType(_recomputed_in_backward, layer)
    return len(layers)


def _recomputed_in_backward(layer: Any, *args: Any, **kwargs: Any) -> Any:
    import torch
    from torch.utils.checkpoint import checkpoint

    forward = type(layer).forward.__get__(layer)
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    # eval mode draws no random numbers, so there is no RNG state to replay
    return checkpoint(forward, *args, use_reentrant=False, preserve_rng_state=False, **kwargs)
