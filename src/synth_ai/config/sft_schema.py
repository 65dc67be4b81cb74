"""The schema of an SFT config: synth-ai 0.2.17's `SFTConfig` sections with their types and bounds, plus the
hyperparameters the embedded backend's trainer honours. The rules across keys and the resolved form are in
`synth_ai.config.sft`; a job body is checked against these models too (`synth_ai.config.job_parts`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from synth_ai.config.common import AlgorithmSection, ComputeSection, LoraSection, PolicySection
from synth_ai.config.fields import (
    SECTION,
    DeepSpeedStage,
    Flag,
    NonEmptyStr,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Ratio,
    StringList,
)
from synth_ai.config.logging_schema import LoggingSection

STEP_KEYS = ("n_epochs", "total_steps", "train_steps", "steps")


class JobSection(BaseModel):
    model_config = SECTION
    model: NonEmptyStr | None = None
    data: str | None = None
    data_path: str | None = None
    poll_seconds: PositiveFloat | None = None


class DataSection(BaseModel):
    model_config = SECTION
    topology: dict[str, Any] | None = None
    validation_path: str | None = None


class ValidationSection(BaseModel):
    model_config = SECTION
    enabled: bool | None = None
    evaluation_strategy: str | None = None
    eval_steps: NonNegativeInt | None = None
    save_best_model_at_end: bool | None = None
    metric_for_best_model: str | None = None
    greater_is_better: bool | None = None


class SFTTrainingSection(BaseModel):
    model_config = SECTION
    mode: str | None = None
    use_qlora: bool | None = None
    validation: ValidationSection | None = None
    lora: LoraSection | None = None
    max_images_per_message: NonNegativeInt | None = None


class ParallelismSection(BaseModel):
    model_config = SECTION
    # The two keys that choose how the model is sharded take only true/false (not pydantic's "yes"/"on"/1).
    use_deepspeed: Flag | None = None
    deepspeed_stage: DeepSpeedStage | None = None
    fsdp: Flag | None = None
    fsdp_sharding_strategy: NonEmptyStr | None = None  # embedded backend: FULL_SHARD (default) or SHARD_GRAD_OP
    bf16: bool | None = None
    fp16: bool | None = None
    activation_checkpointing: bool | None = None
    tensor_parallel_size: PositiveInt | None = None
    pipeline_parallel_size: PositiveInt | None = None


class HyperparametersSection(BaseModel):
    model_config = SECTION
    n_epochs: PositiveInt | None = None
    total_steps: PositiveInt | None = None
    train_steps: PositiveInt | None = None
    steps: PositiveInt | None = None
    batch_size: PositiveInt | None = None
    global_batch: PositiveInt | None = None
    per_device_batch: PositiveInt | None = None
    per_device_eval_batch: PositiveInt | None = None
    gradient_accumulation_steps: PositiveInt | None = None
    sequence_length: PositiveInt | None = None
    learning_rate: PositiveFloat | None = None
    warmup_ratio: Ratio | None = None
    weight_decay: NonNegativeFloat | None = None
    train_kind: str | None = None
    lora_rank: PositiveInt | None = None
    lora_alpha: PositiveFloat | None = None
    lora_dropout: Ratio | None = None
    lora_target_modules: StringList | None = None
    parallelism: ParallelismSection | None = None
    # Honoured by the embedded backend's SFT trainer (docs/sft.md); forwarded as-is to other backends.
    lr_scheduler_type: NonEmptyStr | None = None
    lr_scheduler: NonEmptyStr | None = None  # another spelling of lr_scheduler_type
    max_length: PositiveInt | None = None  # other spellings of sequence_length
    max_seq_length: PositiveInt | None = None
    max_grad_norm: NonNegativeFloat | None = None
    seed: NonNegativeInt | None = None
    logging_steps: NonNegativeInt | None = None
    save_steps: NonNegativeInt | None = None
    checkpoint_steps: NonNegativeInt | None = None  # another spelling of save_steps (0: unset, for both)
    max_images_per_message: NonNegativeInt | None = None
    # [training.validation] travels here in the job body (synth_ai.train.request_bodies)
    evaluation_strategy: str | None = None
    eval_steps: NonNegativeInt | None = None
    save_best_model_at_end: bool | None = None
    metric_for_best_model: str | None = None
    greater_is_better: bool | None = None


class ModelConfigSection(BaseModel):
    model_config = SECTION
    supports_vision: bool | None = None
    max_images_per_message: PositiveInt | None = None
    vision_processor_id: str | None = None
    max_model_len: PositiveInt | None = None


class SFTConfig(BaseModel):
    """An SFT training config (`synth-ai train --type sft`)."""

    model_config = SECTION
    algorithm: AlgorithmSection | None = None
    job: JobSection
    compute: ComputeSection | None = None
    data: DataSection | None = None
    training: SFTTrainingSection | None = None
    hyperparameters: HyperparametersSection | None = None
    # `model_config` is pydantic's own attribute name, so the [model_config] table is reached through an alias.
    model_config_: ModelConfigSection | None = Field(default=None, alias="model_config")
    # The product docs override the registry's image limit with `model.max_images_per_message`: a [model] table
    # takes the [model_config] keys (a top-level `model = "..."` string is the model id, as in 0.2.17).
    model: ModelConfigSection | NonEmptyStr | None = None
    policy: PolicySection | None = None
    lora: LoraSection | None = None
    tags: dict[str, Any] | None = None
    # experiment trackers (docs/tracking.md)
    logging: LoggingSection | None = None
