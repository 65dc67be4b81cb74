"""The reference policy of the KL term (`[training].kl_coef` with `[reference].placement` other than "none"): the
policy the job starts from, frozen, without a second fp32 model.

- LoRA, a fresh adapter: the policy itself with its adapter switched off (peft's `disable_adapter()`): the frozen
  base is the starting policy, so nothing is copied and no parameter is added.
- LoRA, a continued imported adapter: the job starts from base + that adapter, so the reference is the base with
  the adapter's starting weights. Those (adapter-sized) tensors are kept aside and swapped into the adapter's
  parameters for the reference's forward, then swapped back; the base is shared.
- Full: a frozen copy of the starting weights in the dtype the update computes in (bf16 on a CUDA GPU, where the
  update runs under bf16 autocast; fp32 on the CPU, where the update runs in fp32 and bf16 matmuls are slow on
  most CPUs), beside the policy or, with `[training].reference_device = "cpu"`, in host memory (each batch is moved
  there for the reference's forward and its log-probs moved back). The copy is built tensor by tensor in its
  dtype and device, never as a second fp32 model first (`ml.copies.frozen_copy`).

`reference_placement` is the one rule for the full copy's device and dtype.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from synth_ai.backend.ml.copies import frozen_copy
from synth_ai.backend.trainers.runtime import reference_placement  # noqa: F401 - also re-exported


class ReferencePolicy:
    """How the reference log-probs of a batch are computed for one policy (see the module doc). `kind` is
    "adapter_off", "adapter_start" or "copy"; `model` is the copy (None for the LoRA kinds)."""

    def __init__(self, kind: str, *, model: Any = None, start_weights: dict[str, Any] | None = None) -> None:
        self.kind = kind
        self.model = model
        self.start_weights = start_weights or {}
        self.device = None
        self.vision_dtype = None
        if model is not None:
            from synth_ai.backend.ml import loading

            self.device = next(model.parameters()).device
            visual = getattr(loading.core_parts(model)[0], "visual", None)  # Qwen3-VL's vision tower
            self.vision_dtype = next(visual.parameters()).dtype if visual is not None else None

    def logprobs(self, policy: Any, batch: dict[str, Any], autocast: Any, *, chunked: bool = True) -> Any:
        """[rows, completion] log-probs of the batch's targets under the reference, on the batch's device."""
        import torch

        from synth_ai.backend.ml import loading
        from synth_ai.backend.trainers.rl.batches import completion_logprobs

        with torch.no_grad():
            if self.model is not None:
                decoder, lm_head = loading.core_parts(self.model)
                home = batch["targets"].device
                moved = {k: v.to(self.device) if hasattr(v, "to") else v for k, v in batch.items()}
                return completion_logprobs(decoder, lm_head, moved, image_pad=policy.image_pad,
                                           vision_dtype=self.vision_dtype, autocast=autocast,
                                           chunked=chunked).to(home)
            with self._weights(policy.model, policy.trainable):
                return policy.logprobs(batch, autocast, chunked=chunked)  # through FSDP's root when sharded

    @contextmanager
    def _weights(self, model: Any, trainable: dict[str, Any]) -> Iterator[None]:
        if self.kind == "adapter_off":
            with model.disable_adapter():
                yield
            return
        # the adapter's starting tensors in place of its current ones (storage swapped, nothing copied); swapped
        # back before the update's backward reads the current ones
        swap = [(trainable[name], start) for name, start in self.start_weights.items()]
        for param, start in swap:
            param.data, start.data = start.data, param.data
        try:
            yield
        finally:
            for param, start in swap:
                param.data, start.data = start.data, param.data


def build_reference(loaded_model: Any, *, mode: str, continued_adapter: bool, policy_device: str, use_bf16: bool,
                    reference_device: str) -> ReferencePolicy:
    """The reference for a policy loaded as `loaded_model` (before LoRA is added, before any update)."""
    if mode == "lora" and not continued_adapter:
        return ReferencePolicy("adapter_off")
    if mode == "lora":
        start = {name: p.detach().clone() for name, p in loaded_model.named_parameters() if p.requires_grad}
        return ReferencePolicy("adapter_start", start_weights=start)
    device, dtype = reference_placement(policy_device, use_bf16, reference_device)
    return ReferencePolicy("copy", model=frozen_copy(loaded_model, device=device, dtype=dtype))

