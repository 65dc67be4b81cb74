"""FSDP for RL (`[training] fsdp = true` under torchrun): the policy's parameters, gradients and AdamW state sharded
over the ranks with the code SFT uses (`trainers.fsdp`), every rank still sampling its share of the rollouts.

- The root of the sharding is `CompletionLogprobs`, a module around the whole policy whose forward is the update's
  log-probs (the decoder, then the LM head on the completion positions); each decoder layer is a group of its own.
  Every forward of the policy (the update's, the recomputed "old" log-probs, the LoRA reference's with the adapter
  off) goes through it, so the parameters outside the layers are gathered and their gradients reduced.
- Each forward is a collective, so every rank runs the same number of them per step (`equal_passes`): a rank with
  fewer micro-batches runs zero-weighted repeats of one (its loss times 0: nothing added, the collectives kept).
- The rollout engine samples from an unsharded copy of the policy (`serving_copy`, made before sharding, in the
  engine's sampling dtype): at each weight sync or publish the trainable tensors are gathered whole, one at a time,
  into it (`gather_into`; a LoRA job gathers its adapter only: the frozen base never changes). The trainer then
  holds a shard of the weights, gradients and optimiser state; the engine a whole sampling copy.
"""

from __future__ import annotations

from typing import Any

import torch

from synth_ai.backend.trainers import activation_checkpointing
from synth_ai.backend.trainers import fsdp
from synth_ai.backend.trainers.rl.batches import completion_logprobs


class CompletionLogprobs(torch.nn.Module):
    """[rows, completion] log-probs of a collated batch's targets under the policy (`batches.completion_logprobs`),
    as a module: FSDP's root."""

    def __init__(self, model: Any, decoder: Any, lm_head: Any, *, image_pad: int | None, vision_dtype: Any) -> None:
        super().__init__()
        self.policy = model  # registered: its parameters are this module's (the root group)
        self._parts = (decoder, lm_head)  # parts of `policy`, kept outside the module tree (counted once)
        self._image_pad = image_pad
        self._vision_dtype = vision_dtype

    def forward(self, batch: dict[str, Any], autocast: Any = None, chunked: bool = True) -> Any:
        decoder, lm_head = self._parts
        return completion_logprobs(decoder, lm_head, batch, image_pad=self._image_pad,
                                   vision_dtype=self._vision_dtype, autocast=autocast, chunked=chunked)


def serving_copy(model: Any, device: str, dtype: Any) -> Any:
    """The unsharded model the rollout engine samples from (made before sharding: the whole starting weights)."""
    from synth_ai.backend.ml.copies import frozen_copy

    return frozen_copy(model, device=device, dtype=dtype)


def shard_policy(policy: Any, dp: Any, strategy: str) -> CompletionLogprobs:
    """Shard `policy`'s model over the ranks (`trainers.fsdp.shard`) behind a `CompletionLogprobs` root; its
    `trainable` becomes the sharded parameters."""
    root = CompletionLogprobs(policy.model, policy.decoder, policy.lm_head, image_pad=policy.image_pad,
                              vision_dtype=policy.vision_dtype)
    fsdp.shard(root, activation_checkpointing.decoder_layers(policy.decoder), dp, strategy)
    policy.trainable = {n: p for n, p in policy.model.named_parameters() if p.requires_grad}
    return root


def gather_into(trainable: dict[str, Any], served_model: Any) -> None:
    """The trainer's current trainable tensors, gathered whole, into the serving copy (every rank: a collective)."""
    fsdp.copy_full_into(trainable, dict(served_model.named_parameters()))


def equal_passes(parts: list[list[Any]], filler: Any, dp: Any) -> list[tuple[list[Any], float]]:
    """(micro-batch, weight) pairs: this rank's micro-batches, then zero-weighted repeats of one (or of [`filler`]
    on a rank with none) up to the most any rank runs in this step. A collective (the counts are gathered)."""
    from synth_ai.backend.trainers.rl.data_parallel import gather

    most = max(gather(dp, len(parts)))
    pairs = [(part, 1.0) for part in parts]
    repeat = parts[0] if parts else [filler]
    while len(pairs) < most:
        pairs.append((repeat, 0.0))
    return pairs
