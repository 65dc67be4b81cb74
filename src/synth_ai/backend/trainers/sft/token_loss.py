"""The SFT loss as a module: the summed cross-entropy of a micro-batch's labelled next tokens.

The decoder runs once, then the LM head and the cross-entropy run only on the positions whose next token is
labelled, in vocabulary blocks (`ml.token_logprobs`: no [tokens, vocabulary] logits tensor with Qwen's 151k
vocabulary); the sum of the targets' -log p is the summed cross-entropy. It is a module, not a function, so that
under FSDP (`trainers.fsdp`) it can be the root of the sharding: a call through it gathers the parameters the
decoder layers do not own (embeddings, final norm, the LM head, tied or not) and reduces their gradients, which a
direct call of the decoder and then the LM head would bypass.
"""

from __future__ import annotations

from typing import Any

import torch

from synth_ai.backend.ml.token_logprobs import lm_head_scores
from synth_ai.backend.trainers.common import NullContext, decoder_inputs


class SelectedTokenLoss(torch.nn.Module):
    def __init__(self, model: Any, decoder: Any, lm_head: Any, *, bf16: bool, image_pad: int | None,
                 vision_dtype: Any) -> None:
        super().__init__()
        self.policy = model  # registered: its parameters are this module's (FSDP's root group)
        # the decoder and LM head are parts of `policy`; kept outside the module tree so nothing is counted twice
        self._parts = (decoder, lm_head)
        self._bf16 = bf16
        self._image_pad = image_pad
        self._vision_dtype = vision_dtype

    def forward(self, batch: dict[str, Any]) -> Any:
        decoder, lm_head = self._parts
        kwargs = decoder_inputs(batch, image_pad=self._image_pad, vision_dtype=self._vision_dtype)
        autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if self._bf16 else NullContext()
        with autocast:
            hidden = decoder(**kwargs).last_hidden_state[:, :-1]
            targets = batch["labels"][:, 1:]
            selected = targets != -100
            return -lm_head_scores(lm_head, hidden[selected], targets[selected]).logprobs.sum()
