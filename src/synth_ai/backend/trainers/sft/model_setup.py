"""The model an SFT job trains, made ready: loaded (a sharded one on the CPU), activation checkpointing, LoRA,
the selected-token loss around it, FSDP sharding under torchrun, then AdamW and the learning-rate schedule over
the trainable parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synth_ai.backend.trainers.sft.plan import StepPlan
from synth_ai.backend.trainers.sft.runtime import Runtime
from synth_ai.backend.trainers.sft.sft_settings import Reporter, Settings, lr_schedule


@dataclass
class TrainingModel:
    model: Any
    loss_sum: Any  # token_loss.SelectedTokenLoss: the summed loss of a batch's labelled tokens
    trainable: dict[str, Any]  # name -> parameter (after sharding: the sharded parameters)
    optimizer: Any
    scheduler: Any
    sharded: str | None  # the FSDP strategy, or None when every rank holds the whole model
    load_dtype: Any
    root_base: str  # the base model at the root of the model trained from
    continued_adapter: bool  # an imported LoRA adapter trained further (saved as an adapter on root_base)
    total_params: int
    trainable_params: int


def build_training_model(settings: Settings, runtime: Runtime, tokenizer: Any, plan: StepPlan, dp: Any,
                         model_store: Any, reporter: Reporter) -> TrainingModel:
    import torch

    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.common import (imported_adapter_adjustment, is_imported_adapter, load_policy,
                                                  wrap_lora)
    from synth_ai.backend.trainers.sft import fsdp

    torch.manual_seed(settings.seed)
    adapter = is_imported_adapter(model_store, settings.base_model)
    load_dtype = torch.bfloat16 if (runtime.use_bf16 and settings.mode == "lora") else torch.float32
    sharded = settings.fsdp if dp.enabled else None
    if settings.fsdp and not sharded:
        reporter.event("sft.config.adjusted", "fsdp shards the model over torchrun ranks; this job runs as one "
                       "process, which holds the whole model.", {"fsdp": None})
    # a sharded model is loaded on the CPU: fully_shard moves each rank's shards to its GPU, one layer at a time
    model, _, root_base, _ = load_policy(model_store, settings.base_model,
                                         loading.Placement("cpu" if sharded else runtime.where.device, load_dtype),
                                         keep_adapter=adapter)
    if adapter:
        message, adjusted = imported_adapter_adjustment(settings.base_model, model, settings)
        if settings.mode != "lora" or len(adjusted) > 1:
            reporter.event("sft.config.adjusted", message, adjusted)
    if settings.activation_checkpointing:
        _checkpoint_activations(model)
    if settings.mode == "lora" and not adapter:
        model = wrap_lora(model, settings, runtime.vision)
    model.train()
    total_params = sum(p.numel() for p in model.parameters())
    decoder, loss_sum = _selected_token_loss(model, tokenizer, runtime)
    if sharded:
        fsdp.shard(loss_sum, fsdp.decoder_layers(decoder), dp, sharded)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}  # after sharding: its parameters
    # fused: one kernel over every tensor, on the CPU too (34M parameters: 0.05 s a step against foreach's 0.2 s);
    # FSDP's sharded tensors on the CPU keep foreach
    fused = runtime.where.device == "cuda" or not sharded
    optimizer = torch.optim.AdamW(list(trainable.values()), lr=settings.learning_rate, betas=(0.9, 0.999),
                                  eps=1e-8, weight_decay=settings.weight_decay,
                                  **({"fused": True} if fused else {"foreach": True}))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_schedule(settings.lr_scheduler, plan.warmup_steps, plan.total_steps))
    return TrainingModel(model, loss_sum, trainable, optimizer, scheduler, sharded, load_dtype, root_base, adapter,
                         total_params, sum(p.numel() for p in trainable.values()))


def _checkpoint_activations(model: Any) -> None:
    # non-reentrant: gradients reach LoRA weights even though the (frozen) inputs need no grad
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False


def _selected_token_loss(model: Any, tokenizer: Any, runtime: Runtime) -> tuple[Any, Any]:
    """(the decoder, the loss module around `model`)."""
    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.sft.token_loss import SelectedTokenLoss

    decoder, lm_head = loading.core_parts(model)
    image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>") if runtime.vision else None
    vision_dtype = next(decoder.visual.parameters()).dtype if runtime.vision else None
    return decoder, SelectedTokenLoss(model, decoder, lm_head, bf16=runtime.use_bf16, image_pad=image_pad,
                                      vision_dtype=vision_dtype)
