"""The SFT job's settings: the job payload read into `Settings`, with every bad value refused by the key that
holds it (the backend calls `resolve_settings` at create time, so a bad value is a 400, not a failed job); plus the
learning-rate schedule and where the job's data files are."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from synth_ai.errors import InvalidInputError, NotFoundError

FULL_KINDS = {"full", "full_finetune", "full-finetune", "fft", "full_ft", "sft", "supervised_finetune"}
LORA_KINDS = {"lora", "peft", "qlora"}
DEFAULT_LORA_TARGETS = "all-linear"


class Reporter(Protocol):
    def event(self, type: str, message: str, data: dict[str, Any] | None = None, level: str = "info") -> None: ...

    def metric(self, name: str, step: int, value: float, phase: str = "train") -> None: ...


class TrainingCancelled(Exception):
    """`should_stop()` answered True: training stopped between steps (a checkpoint was saved first)."""

    def __init__(self, step: int, checkpoint: Path | None) -> None:
        super().__init__(f"training stopped at step {step}")
        self.step = step
        self.checkpoint = checkpoint


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


def _pick(*candidates: tuple[str, Any]) -> tuple[str | None, Any]:
    for key, value in candidates:
        if value is not None and value != "":
            return key, value
    return None, None


def _int(key: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise InvalidInputError(f"{key} must be an integer (found {value!r}).")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{key} must be an integer (found {value!r}).") from None
    if not number.is_integer() or number < minimum:
        raise InvalidInputError(f"{key} must be an integer >= {minimum} (found {value!r}).")
    return int(number)


def _float(key: str, value: Any, *, low: float | None = None, high: float | None = None,
           strict_low: bool = False) -> float:
    if isinstance(value, bool):
        raise InvalidInputError(f"{key} must be a number (found {value!r}).")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{key} must be a number (found {value!r}).") from None
    if not math.isfinite(number) or (low is not None and (number <= low if strict_low else number < low)) or (
            high is not None and number > high):
        bounds = f"{'>' if strict_low else '>='} {low}" if low is not None else ""
        if high is not None:
            bounds += f"{' and ' if bounds else ''}<= {high}"
        raise InvalidInputError(f"{key} must be a number {bounds} (found {value!r}).")
    return number


def resolve_settings(spec: dict[str, Any]) -> Settings:
    """Read the job payload into `Settings`, refusing bad values with the key that holds them."""
    model = spec.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidInputError("The SFT job has no model.", hint="Set [job].model, e.g. 'synth-ai/tiny-qwen3'.")
    hp = dict(spec.get("hyperparameters") or {})
    effective = ((spec.get("metadata") or {}).get("effective_config") or {})
    training = effective.get("training") or {}
    lora_cfg = dict(effective.get("lora") or training.get("lora") or {})
    model_cfg = effective.get("model_config") or effective.get("model") or {}
    algorithm = effective.get("algorithm") or {}
    notes: list[str] = []

    _, kind = _pick(("hyperparameters.train_kind", hp.get("train_kind")),
                    ("[training].mode", training.get("mode")), ("[algorithm].variety", algorithm.get("variety")))
    kind = str(kind or "full").strip().lower()
    if training.get("use_qlora") or kind == "qlora":
        notes.append("QLoRA was requested; this backend trains LoRA adapters without quantising the base model.")
    if kind in FULL_KINDS:
        mode = "full"
    elif kind in LORA_KINDS:
        mode = "lora"
    else:
        raise InvalidInputError(f"Unknown training mode '{kind}'.",
                                hint="Use 'full' (or full_finetune, fft) or 'lora' (or peft).")

    step_key, steps = _pick(("hyperparameters.total_steps", hp.get("total_steps")),
                            ("hyperparameters.train_steps", hp.get("train_steps")),
                            ("hyperparameters.steps", hp.get("steps")))
    total_steps = _int(step_key, steps) if step_key else None
    raw_epochs = hp.get("n_epochs")
    n_epochs = None if total_steps else (_int("hyperparameters.n_epochs", raw_epochs) if raw_epochs is not None
                                         else 1)

    default_lr = 2e-4 if mode == "lora" else 2e-5
    lr = _float("hyperparameters.learning_rate", hp.get("learning_rate", default_lr), low=0.0, strict_low=True)
    warmup = _float("hyperparameters.warmup_ratio", hp.get("warmup_ratio", 0.0), low=0.0, high=1.0)
    scheduler = str(hp.get("lr_scheduler_type") or hp.get("lr_scheduler") or "linear").lower()
    if scheduler not in {"linear", "cosine", "constant"}:
        raise InvalidInputError(f"hyperparameters.lr_scheduler_type must be linear, cosine or constant "
                                f"(found {scheduler!r}).")
    batch_key, batch = _pick(("hyperparameters.per_device_batch", hp.get("per_device_batch")),
                             ("hyperparameters.batch_size", hp.get("batch_size")))
    per_device = _int(batch_key, batch) if batch_key else 1
    if hp.get("gradient_accumulation_steps") is not None:
        accum = _int("hyperparameters.gradient_accumulation_steps", hp["gradient_accumulation_steps"])
    elif hp.get("global_batch") is not None:
        accum = max(1, math.ceil(_int("hyperparameters.global_batch", hp["global_batch"]) / per_device))
    else:
        accum = 1
    seq = hp.get("sequence_length") or hp.get("max_length") or hp.get("max_seq_length")
    sequence_length = _int("hyperparameters.sequence_length", seq, minimum=8) if seq else 4096

    validation = training.get("validation") or {}
    eval_raw = hp.get("eval_steps", validation.get("eval_steps"))
    eval_steps = _int("hyperparameters.eval_steps", eval_raw, minimum=0) if eval_raw not in (None, "") else 0
    if str(hp.get("evaluation_strategy", "steps")).lower() == "no":
        eval_steps = 0
    save_raw = hp.get("save_steps") or hp.get("checkpoint_steps")
    save_steps = _int("hyperparameters.save_steps", save_raw) if save_raw else None
    logging_raw = hp.get("logging_steps")
    logging_steps = _int("hyperparameters.logging_steps", logging_raw) if logging_raw else None
    parallelism = hp.get("parallelism") or {}
    if not isinstance(parallelism, dict):
        raise InvalidInputError(f"hyperparameters.parallelism must be a table (found {parallelism!r}).")
    bf16 = parallelism.get("bf16")
    fsdp = _sharding(parallelism, notes)

    _, max_images = _pick(("hyperparameters.max_images_per_message", hp.get("max_images_per_message")),
                          ("[model_config].max_images_per_message", model_cfg.get("max_images_per_message")),
                          ("[training].max_images_per_message", training.get("max_images_per_message")))
    if max_images is not None:
        max_images = _int("max_images_per_message", max_images, minimum=0)

    _, rank = _pick(("lora_rank", hp.get("lora_rank")), ("lora.r", lora_cfg.get("r")),
                    ("lora.rank", lora_cfg.get("rank")))
    _, alpha = _pick(("lora_alpha", hp.get("lora_alpha")), ("lora.alpha", lora_cfg.get("alpha")),
                     ("lora.lora_alpha", lora_cfg.get("lora_alpha")))
    _, dropout = _pick(("lora_dropout", hp.get("lora_dropout")), ("lora.dropout", lora_cfg.get("dropout")),
                       ("lora.lora_dropout", lora_cfg.get("lora_dropout")))
    _, targets = _pick(("lora_target_modules", hp.get("lora_target_modules")),
                       ("lora.target_modules", lora_cfg.get("target_modules")))
    lora_r = _int("lora_rank", rank) if rank is not None else 16
    lora_alpha = _float("lora_alpha", alpha, low=0.0, strict_low=True) if alpha is not None else 2.0 * lora_r
    lora_dropout = _float("lora_dropout", dropout, low=0.0, high=0.99) if dropout is not None else 0.05
    if targets is None:
        targets = DEFAULT_LORA_TARGETS
    elif isinstance(targets, str):
        targets = targets.strip()
    elif isinstance(targets, (list, tuple)) and targets and all(isinstance(t, str) for t in targets):
        targets = [t.strip() for t in targets]
        if "all-linear" in targets:
            targets = "all-linear"
    else:
        raise InvalidInputError(f"lora_target_modules must be 'all-linear' or a list of module names "
                                f"(found {targets!r}).")

    return Settings(
        base_model=model.strip(), job_id=str(spec.get("job_id") or "local"), mode=mode, learning_rate=lr,
        n_epochs=n_epochs, total_steps=total_steps, warmup_ratio=warmup, lr_scheduler=scheduler,
        per_device_batch=per_device, gradient_accumulation_steps=accum, sequence_length=sequence_length,
        eval_steps=eval_steps, save_steps=save_steps,
        weight_decay=_float("hyperparameters.weight_decay", hp.get("weight_decay", 0.0), low=0.0),
        max_grad_norm=_float("hyperparameters.max_grad_norm", hp.get("max_grad_norm", 1.0), low=0.0),
        seed=_int("hyperparameters.seed", hp.get("seed", 42), minimum=0), logging_steps=logging_steps,
        bf16=bf16 if isinstance(bf16, bool) else None,
        activation_checkpointing=bool(parallelism.get("activation_checkpointing")),
        max_images_per_message=max_images, lora_r=lora_r, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
        lora_targets=targets, fsdp=fsdp, notes=notes,
    )


_STRATEGIES = {"full_shard": "full_shard", "shard_grad_op": "shard_grad_op", "zero3": "full_shard",
               "zero2": "shard_grad_op"}


def _sharding(parallelism: dict[str, Any], notes: list[str]) -> str | None:
    """How the torchrun ranks shard the model (`trainers.fsdp`), from the reference's `fsdp`, `use_deepspeed` and
    `deepspeed_stage` keys plus this backend's `fsdp_sharding_strategy` (see docs/decisions.md)."""
    where = "hyperparameters.parallelism"
    fsdp = parallelism.get("fsdp")
    if fsdp is not None and not isinstance(fsdp, bool):
        raise InvalidInputError(f"{where}.fsdp must be true or false (found {fsdp!r}).")
    raw = parallelism.get("fsdp_sharding_strategy")
    strategy = None
    if raw is not None:
        strategy = _STRATEGIES.get(str(raw).strip().lower())
        if strategy is None:
            raise InvalidInputError(f"{where}.fsdp_sharding_strategy must be FULL_SHARD or SHARD_GRAD_OP "
                                    f"(found {raw!r}).", hint="Or leave it out: FULL_SHARD is the default.")
    if parallelism.get("use_deepspeed"):
        stage = parallelism.get("deepspeed_stage")
        stage = _int(f"{where}.deepspeed_stage", stage, minimum=0) if stage is not None else 0
        if stage > 3:
            raise InvalidInputError(f"{where}.deepspeed_stage must be 0, 1, 2 or 3 (found {stage}).")
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


def data_path(spec: dict[str, Any], key: str, *, required: bool) -> Path | None:
    raw = spec.get(key)
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
