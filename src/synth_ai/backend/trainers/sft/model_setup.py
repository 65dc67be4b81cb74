"""The model an SFT job trains, made ready: loaded (a sharded one on the CPU), activation checkpointing, LoRA,
the selected-token loss around it, FSDP sharding under torchrun, then AdamW and the learning-rate schedule over
the trainable parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synth_ai.backend.trainers import activation_checkpointing
from synth_ai.backend.trainers.optimizer import build_adamw
from synth_ai.backend.trainers.runtime import Runtime, load_trainable_policy, with_lora
from synth_ai.backend.trainers.sft.plan import StepPlan
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

    from synth_ai.backend.trainers import fsdp

    sharded = settings.fsdp if dp.enabled else None
    if settings.fsdp and not sharded:
        reporter.event("sft.config.adjusted", "fsdp shards the model over torchrun ranks; this job runs as one "
                       "process, which holds the whole model.", {"fsdp": None})
    # a sharded model is loaded on the CPU: fully_shard moves each rank's shards to its GPU, one layer at a time
    policy = load_trainable_policy(model_store, settings.base_model, runtime, settings, seed=settings.seed,
                                   full_mode_merges_adapter=False, device="cpu" if sharded else None)
    adapter, root_base = policy.continued_adapter, policy.root_base
    if policy.adjustment is not None:
        message, adjusted = policy.adjustment
        if settings.mode != "lora" or len(adjusted) > 1:
            reporter.event("sft.config.adjusted", message, adjusted)
    if settings.activation_checkpointing:
        activation_checkpointing.for_train_mode(policy.model)
    model = with_lora(policy, settings, runtime)
    model.train()
    total_params = sum(p.numel() for p in model.parameters())
    decoder, loss_sum = _selected_token_loss(model, tokenizer, runtime)
    if sharded:
        fsdp.shard(loss_sum, activation_checkpointing.decoder_layers(decoder), dp, sharded)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}  # after sharding: its parameters
    optimizer = build_adamw(trainable.values(), lr=settings.learning_rate, weight_decay=settings.weight_decay,
                            device=runtime.where.device, sharded=bool(sharded))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_schedule(settings.lr_scheduler, plan.warmup_steps, plan.total_steps))
    return TrainingModel(model, loss_sum, trainable, optimizer, scheduler, sharded, runtime.load_dtype(settings.mode),
                         root_base, adapter, total_params, sum(p.numel() for p in trainable.values()))


def _selected_token_loss(model: Any, tokenizer: Any, runtime: Runtime) -> tuple[Any, Any]:
    """(the decoder, the loss module around `model`)."""
    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.sft.token_loss import SelectedTokenLoss

    decoder, lm_head = loading.core_parts(model)
    image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>") if runtime.vision else None
    vision_dtype = next(decoder.visual.parameters()).dtype if runtime.vision else None
    return decoder, SelectedTokenLoss(model, decoder, lm_head, bf16=runtime.use_bf16, image_pad=image_pad,
                                      vision_dtype=vision_dtype)
