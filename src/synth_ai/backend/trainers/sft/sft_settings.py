"""The SFT job's settings: the job payload read into `Settings`, with every bad value refused by the key that
holds it (the backend calls `resolve_settings` at create time, so a bad value is a 400, not a failed job); plus the
learning-rate schedule and where the job's data files are. The keys' types and bounds are the config models'
(`synth_ai.config.sft_schema`); the number readers and mode spellings shared with RL are in `trainers.common`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from synth_ai.backend.trainers.common import (  # noqa: F401 - re-exported: shared with the RL trainer
    DEFAULT_LORA_TARGETS,
    FULL_KINDS,
    LORA_KINDS,
    TrainingCancelled,
    _float,
    _int,
    first_set,
)
from synth_ai.backend.trainers.job_context import JobReporter
from synth_ai.config.common import LoraSection
from synth_ai.config.job_parts import check_part, dotted_key, lenient
from synth_ai.config.job_specs import SFTJobSpec
from synth_ai.config.sft_schema import (
    HyperparametersSection,
    ModelConfigSection,
    ParallelismSection,
    SFTConfig,
    SFTTrainingSection,
)
from synth_ai.errors import InvalidInputError, NotFoundError


Reporter = JobReporter  # the name the SFT stages import it under


# Settings ---------------------------------------------------------------------------------------------------------
@dataclass
class Settings:
    base_model: str
    job_id: str
    mode: str  # "full" | "lora"
    learning_rate: float
    n_epochs: int | None
    total_steps: int | None
    warmup_ratio: float = 0.0
    lr_scheduler: str = "linear"
    per_device_batch: int = 1
    gradient_accumulation_steps: int = 1
    sequence_length: int | None = 4096
    eval_steps: int = 0
    save_steps: int | None = None
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    seed: int = 42
    logging_steps: int | None = None
    bf16: bool | None = None
    activation_checkpointing: bool = False
    max_images_per_message: int | None = None
    lora_r: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.05
    lora_targets: Any = DEFAULT_LORA_TARGETS
    fsdp: str | None = None  # None (every rank holds the whole model) | "full_shard" | "shard_grad_op"
    notes: list[str] = field(default_factory=list)

    def fingerprint(self) -> dict[str, Any]:
        """What must not change between a checkpoint and its resume."""
        keep = ("base_model", "mode", "n_epochs", "total_steps", "per_device_batch", "gradient_accumulation_steps",
                "sequence_length", "seed", "lora_r", "lora_targets")
        data = asdict(self)
        kept = {k: data[k] for k in keep}
        if self.fsdp:  # a sharded checkpoint's optimizer state is keyed by name: it resumes only under FSDP
            kept["fsdp"] = self.fsdp
        return kept


def resolve_settings(spec: SFTJobSpec | Mapping[str, Any]) -> Settings:
    """Read the job payload into `Settings`. Types and bounds of the keys come from the config models
    (`synth_ai.config.job_parts`), so a bad value is refused with its key exactly as `config validate` and the
    backend refuse it; what is checked here is what only this trainer decides (modes, schedules, sharding)."""
    spec = SFTJobSpec.of(spec)
    model = spec.model_id
    if model is None:
        raise InvalidInputError("The SFT job has no model.", hint="Set [job].model, e.g. 'synth-ai/tiny-qwen3'.")
    hp = check_part(HyperparametersSection, spec.hyperparameters, dotted_key("hyperparameters"))
    effective = check_part(SFTConfig, spec.effective_config)
    training = effective.training or lenient(SFTTrainingSection)()
    notes: list[str] = []
    mode = _mode(hp, training, effective.algorithm, notes)
    total_steps = first_set(hp.total_steps, hp.train_steps, hp.steps)
    per_device = first_set(hp.per_device_batch, hp.batch_size) or 1
    accumulation = hp.gradient_accumulation_steps or (math.ceil(hp.global_batch / per_device) if hp.global_batch
                                                      else 1)
    sequence = first_set(hp.sequence_length, hp.max_length, hp.max_seq_length)
    parallelism = hp.parallelism or lenient(ParallelismSection)()
    return Settings(
        base_model=model, job_id=spec.job_id, mode=mode,
        learning_rate=first_set(hp.learning_rate, 2e-4 if mode == "lora" else 2e-5),
        n_epochs=None if total_steps else (hp.n_epochs or 1), total_steps=total_steps,
        warmup_ratio=hp.warmup_ratio or 0.0, lr_scheduler=_scheduler(hp), per_device_batch=per_device,
        gradient_accumulation_steps=max(1, accumulation),
        sequence_length=_int("hyperparameters.sequence_length", sequence, minimum=8) if sequence else 4096,
        eval_steps=_eval_steps(hp, training), save_steps=first_set(hp.save_steps, hp.checkpoint_steps) or None,
        weight_decay=first_set(hp.weight_decay, 0.0), max_grad_norm=first_set(hp.max_grad_norm, 1.0),
        seed=first_set(hp.seed, 42), logging_steps=hp.logging_steps or None, bf16=parallelism.bf16,
        activation_checkpointing=bool(parallelism.activation_checkpointing),
        max_images_per_message=first_set(hp.max_images_per_message, _model_table(effective).max_images_per_message,
                                     training.max_images_per_message),
        fsdp=_sharding(parallelism, notes), notes=notes, **_lora(hp, effective.lora or training.lora))


def _mode(hp: Any, training: Any, algorithm: Any, notes: list[str]) -> str:
    named = first_set(hp.train_kind, training.mode, algorithm.variety if algorithm else None)
    kind = str(named or "full").strip().lower()
    if training.use_qlora or kind == "qlora":
        notes.append("QLoRA was requested; this backend trains LoRA adapters without quantising the base model.")
    if kind in FULL_KINDS:
        return "full"
    if kind in LORA_KINDS:
        return "lora"
    raise InvalidInputError(f"Unknown training mode '{kind}'.",
                            hint="Use 'full' (or full_finetune, fft) or 'lora' (or peft).")


def _scheduler(hp: Any) -> str:
    scheduler = str(first_set(hp.lr_scheduler_type, hp.lr_scheduler) or "linear").lower()
    if scheduler not in {"linear", "cosine", "constant"}:
        raise InvalidInputError(f"hyperparameters.lr_scheduler_type must be linear, cosine or constant "
                                f"(found {scheduler!r}).")
    return scheduler


def _eval_steps(hp: Any, training: Any) -> int:
    if str(hp.evaluation_strategy or "steps").lower() == "no":
        return 0
    validation = training.validation
    return first_set(hp.eval_steps, validation.eval_steps if validation else None) or 0


def _model_table(effective: Any) -> Any:
    """[model_config], or the docs' [model] table (a `model = "..."` string is the model id, not a table)."""
    for table in (effective.model_config_, effective.model):
        if isinstance(table, BaseModel):
            return table
    return lenient(ModelConfigSection)()


def _lora(hp: Any, lora: Any) -> dict[str, Any]:
    lora = lora or lenient(LoraSection)()
    rank = first_set(hp.lora_rank, lora.r, lora.rank) or 16
    alpha = first_set(hp.lora_alpha, lora.alpha, lora.lora_alpha)
    dropout = first_set(hp.lora_dropout, lora.dropout, lora.lora_dropout)
    targets = first_set(hp.lora_target_modules, lora.target_modules)
    if targets is not None and not targets:
        raise InvalidInputError("lora_target_modules must be 'all-linear' or a list of module names (found []).")
    return {"lora_r": rank, "lora_alpha": alpha if alpha is not None else 2.0 * rank,
            # dropout 1 would zero every adapter input: this trainer stops just below it
            "lora_dropout": _float("lora_dropout", dropout, low=0.0, high=0.99) if dropout is not None else 0.05,
            "lora_targets": DEFAULT_LORA_TARGETS if targets is None or DEFAULT_LORA_TARGETS in targets
            else [t.strip() for t in targets]}


_STRATEGIES = {"full_shard": "full_shard", "shard_grad_op": "shard_grad_op", "zero3": "full_shard",
               "zero2": "shard_grad_op"}


def _sharding(parallelism: Any, notes: list[str]) -> str | None:
    """How the torchrun ranks shard the model (`trainers.fsdp`), from the reference's `fsdp`, `use_deepspeed` and
    `deepspeed_stage` keys plus this backend's `fsdp_sharding_strategy` (see docs/decisions.md)."""
    where = "hyperparameters.parallelism"
    fsdp, raw = parallelism.fsdp, parallelism.fsdp_sharding_strategy
    strategy = None
    if raw is not None:
        strategy = _STRATEGIES.get(raw.strip().lower())
        if strategy is None:
            raise InvalidInputError(f"{where}.fsdp_sharding_strategy must be FULL_SHARD or SHARD_GRAD_OP "
                                    f"(found {raw!r}).", hint="Or leave it out: FULL_SHARD is the default.")
    if parallelism.use_deepspeed:
        stage = parallelism.deepspeed_stage or 0
        if fsdp is False:
            raise InvalidInputError(f"{where}: use_deepspeed with fsdp = false asks for both sharding and none.",
                                    hint="Remove one of the two keys.")
        if stage >= 2 and not fsdp:
            notes.append(f"DeepSpeed ZeRO stage {stage} was requested; this backend shards with PyTorch FSDP "
                         f"({'FULL_SHARD' if stage == 3 else 'SHARD_GRAD_OP'}) instead.")
            return strategy or ("full_shard" if stage == 3 else "shard_grad_op")
        if not fsdp:
            notes.append(f"DeepSpeed ZeRO stage {stage} was requested; this backend trains without DeepSpeed "
                         "(plain data parallelism: every rank holds the whole model).")
    if fsdp:
        return strategy or "full_shard"
    if strategy is not None:
        notes.append(f"{where}.fsdp_sharding_strategy is ignored: fsdp is not on.")
    return None


def data_path(spec: SFTJobSpec, role: str, *, required: bool) -> Path | None:
    """The local path of the job's `role` file ("training", "validation"), checked to exist."""
    raw = spec.files.get(role)
    key = f"{role}_file_path"
    if not raw:
        if required:
            raise InvalidInputError(f"The SFT job spec has no {key}.")
        return None
    path = Path(raw)
    if not path.is_file():
        raise NotFoundError(f"{key} {path} does not exist.")
    return path


def lr_schedule(kind: str, warmup: int, total: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if kind == "constant":
            return 1.0
        progress = (step - warmup) / max(1, total - warmup)
        progress = min(max(progress, 0.0), 1.0)
        if kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return max(0.0, 1.0 - progress)

    return factor
