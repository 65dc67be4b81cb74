"""The policy an RL job trains, loaded through the runtime shared with SFT (`trainers/runtime.py`: device, dtype,
threads, LoRA, vision): the model (full or LoRA, from a base, a fine-tune or an imported adapter), its tokenizer and
Qwen3-VL processor, the frozen reference when `kl_coef` asks for one (`rl.reference`), and the parts the update
reads (decoder, LM head, pad and image tokens). `served()` describes it for the rollout engine.

Dropout stays off (the model is kept in eval mode): the log-probs computed for training must equal the ones
recorded while sampling, so that the first update of an iteration is exactly on-policy (ratio 1). Activation
checkpointing (`[training].activation_checkpointing`, on CUDA by default) therefore works in eval mode
(`trainers.activation_checkpointing.in_eval_mode`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from synth_ai.backend.trainers import activation_checkpointing
from synth_ai.backend.trainers.common import first_set
from synth_ai.backend.trainers.rl.reference import build_reference
from synth_ai.backend.trainers.rl.rl_settings import RLSettings
from synth_ai.backend.trainers.runtime import (
    choose_runtime,
    load_trainable_policy,
    with_lora,
)


class RLPolicy:
    def __init__(self, settings: RLSettings, model_store: Any, *, load_device: str | None = None) -> None:
        from synth_ai.backend.ml import loading

        self.settings = settings
        runtime = choose_runtime(model_store, settings.model_id)  # RL has no bf16 key: the GPU decides
        self.runtime = runtime
        # LoRA mode continues an imported adapter as that adapter (as SFT does); full mode trains it merged
        loaded = load_trainable_policy(model_store, settings.model_id, runtime, settings, seed=settings.seed,
                                       full_mode_merges_adapter=True, device=load_device)
        self.tokenizer_path, self.root_base, self.from_lora = loaded.tokenizer_path, loaded.root_base, loaded.from_lora
        self.continued_adapter = loaded.continued_adapter
        self.adjustment = loaded.adjustment  # the `rl.config.adjusted` event the loop reports, or None
        self.tokenizer = loading.load_tokenizer(self.tokenizer_path)
        self.processor = None
        if runtime.vision:
            path = runtime.model_path
            source = path if (Path(path) / "preprocessor_config.json").exists() else runtime.base_path
            self.processor = loading.build_processor(self.tokenizer, loading.load_image_processor(source))
        # the KL term's reference: the starting policy without a second fp32 model (`rl.reference`)
        self.reference = build_reference(loaded.model, mode=settings.mode, continued_adapter=loaded.continued_adapter,
                                         policy_device=runtime.where.device, use_bf16=runtime.use_bf16,
                                         reference_device=settings.reference_device) if settings.reference else None
        model = with_lora(loaded, settings, runtime)
        model.eval()  # no dropout: see the module docstring
        self.model = model
        self.trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
        self.trainable_count = sum(p.numel() for p in self.trainable.values())
        self.decoder, self.lm_head = loading.core_parts(model)
        # unset: on where it pays (a GPU's memory); the CPU's tiny and mid models are faster without the recompute
        self.activation_checkpointing = first_set(settings.activation_checkpointing, runtime.where.device == "cuda")
        if self.activation_checkpointing:  # the model stays in eval mode: see `trainers.activation_checkpointing`
            activation_checkpointing.in_eval_mode(self.decoder)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.image_pad = loading.special_token_id(self.tokenizer, "<|image_pad|>") if runtime.vision else None
        self.vision_dtype = next(self.decoder.visual.parameters()).dtype if runtime.vision else None
        self.root: Any = None  # FSDP's root once sharded (`rl.sharded_policy`): every forward goes through it

    def logprobs(self, batch: dict[str, Any], autocast: Any, *, chunked: bool = True) -> Any:
        """[rows, completion] log-probs of `batch`'s targets under the policy (through FSDP's root when sharded)."""
        if self.root is not None:
            return self.root(batch, autocast, chunked)
        from synth_ai.backend.trainers.rl.batches import completion_logprobs

        return completion_logprobs(self.decoder, self.lm_head, batch, image_pad=self.image_pad,
                                   vision_dtype=self.vision_dtype, autocast=autocast, chunked=chunked)

    @property
    def where(self) -> Any:
        """The device and the dtype the weights were loaded in (`loading.Placement`)."""
        from synth_ai.backend.ml import loading

        return loading.Placement(self.runtime.where.device, self.runtime.load_dtype(self.settings.mode))

    def served(self, model: Any = None) -> Any:
        """The policy (or `model`, its unsharded sampling copy) as the rollout engine serves it
        (`inference.engine.LoadedModel`)."""
        from synth_ai.backend.inference.engine import describe_model

        return describe_model(self.settings.label or self.settings.model_id, Path(self.tokenizer_path),
                              self.model if model is None else model,
                              self.tokenizer, vision=self.runtime.vision, processor=self.processor,
                              device=self.runtime.where.device)
