"""The schema of an RL (GSPO) config: synth-ai 0.2.17's `RLConfig` sections with their types and bounds. The rules
across keys and the resolved form are in `synth_ai.config.rl`; a job body is checked against these models too
(`synth_ai.config.job_parts`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from synth_ai.config.common import (
    AlgorithmSection,
    ComputeSection,
    LoraSection,
    PolicyRuntimeSection,
    PolicySection,
    ThinkingMode,
    TopologySection,
)
from synth_ai.config.fields import (
    SECTION,
    FiniteFloat,
    NonEmptyStr,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Seeds,
    StringList,
)
from synth_ai.config.logging_schema import LoggingSection


class ServicesSection(BaseModel):
    model_config = SECTION
    task_url: str | None = None
    judge_url: str | None = None


class VllmSection(BaseModel):
    model_config = SECTION
    tensor_parallel_size: PositiveInt | None = None
    max_model_len: PositiveInt | None = None
    gpu_memory_utilization: PositiveFloat | None = None
    limit_mm_per_prompt: dict[str, int] | None = None
    kv_cache_memory_bytes: PositiveInt | None = None


class ReferenceSection(BaseModel):
    model_config = SECTION
    placement: str | None = None


class ModelSection(BaseModel):
    model_config = SECTION
    source: str | None = None
    base: str | None = None
    trainer_mode: NonEmptyStr
    label: NonEmptyStr
    supports_vision: bool | None = None
    max_images_per_message: PositiveInt | None = None
    vision_processor_id: str | None = None


class RolloutSection(BaseModel):
    model_config = SECTION
    env_name: NonEmptyStr
    policy_name: NonEmptyStr
    env_config: dict[str, Any] | None = None
    policy_config: PolicyRuntimeSection | None = None
    max_turns: PositiveInt
    episodes_per_batch: PositiveInt
    max_concurrent_rollouts: PositiveInt
    batches_per_step: PositiveInt | None = None
    ops: StringList | None = None
    use_vision: bool | None = None
    image_only_mode: bool | None = None
    max_images_per_step: PositiveInt | None = None
    thinking_mode: ThinkingMode | None = None
    thinking_budget: PositiveInt | None = None


class WeightSyncSection(BaseModel):
    model_config = SECTION
    enable: bool | None = None
    targets: StringList | None = None
    mode: str | None = None
    direct: bool | None = None
    verify_every_k: PositiveInt | None = None
    interval: PositiveInt | None = None


class TrainingSection(BaseModel):
    model_config = SECTION
    num_epochs: PositiveInt
    iterations_per_epoch: PositiveInt
    max_turns: PositiveInt
    batch_size: PositiveInt
    group_size: PositiveInt
    learning_rate: PositiveFloat
    weight_sync_interval: PositiveInt
    log_interval: PositiveInt
    gradient_accumulation_steps: PositiveInt | None = None
    max_accumulated_minibatch: PositiveInt | None = None
    async_semaphore_max: PositiveInt | None = None
    step_rewards_enabled: bool | None = None
    step_rewards_mode: str | None = None
    step_rewards_indicator_lambda: FiniteFloat | None = None
    step_rewards_beta: FiniteFloat | None = None
    step_rewards_strategy: str | None = None
    event_rewards_kind: str | None = None
    weight_sync: WeightSyncSection | None = None
    lora: LoraSection | None = None
    rewards: dict[str, Any] | None = None
    supports_vision: bool | None = None
    max_images_per_message: PositiveInt | None = None
    # Honoured by the embedded backend's GSPO trainer (docs/rl.md); forwarded as-is to other backends.
    seed: NonNegativeInt | None = None
    clip_epsilon_low: PositiveFloat | None = None
    clip_epsilon_high: PositiveFloat | None = None
    kl_coef: NonNegativeFloat | None = None
    max_grad_norm: NonNegativeFloat | None = None
    weight_decay: NonNegativeFloat | None = None
    checkpoint_interval: PositiveInt | None = None
    rollout_timeout_s: PositiveFloat | None = None
    rollout_retries: NonNegativeInt | None = None
    task_app_wait_s: NonNegativeFloat | None = None  # how long to wait for an unreachable task app; 0: not at all
    # asynchronous GSPO (docs/rl.md, "Asynchronous GSPO"): 0 is the synchronous loop
    max_staleness: NonNegativeInt | None = None
    importance_sampling_cap: PositiveFloat | None = None
    # issue 38 items 4-5, the reference model and the optimiser states (docs/training.md, "Memory of the reference
    # and the optimiser")
    reference_device: Literal["auto", "cpu"] | None = None
    optimizer_states: Literal["fp32", "8bit", "cpu_offload"] | None = None
    # issue 38 item 1: the LM head's log-probs in vocabulary blocks (docs/training.md); false: materialised logits
    chunked_logprobs: bool | None = None
    # update memory (issue 38 items 2-3): activation checkpointing (unset: on CUDA only) and the tokens one
    # forward/backward takes (docs/rl.md, "Update memory")
    activation_checkpointing: bool | None = None
    micro_batch_tokens: PositiveInt | None = None
    # issue 39 item 1, FSDP for RL (docs/scale.md, "FSDP for RL"): the policy sharded over the torchrun ranks
    fsdp: bool | None = None
    fsdp_sharding_strategy: Literal["FULL_SHARD", "SHARD_GRAD_OP"] | None = None


class EvaluationSection(BaseModel):
    model_config = SECTION
    instances: PositiveInt
    every_n_iters: PositiveInt
    seeds: Seeds
    thinking_mode: ThinkingMode | None = None
    thinking_budget: PositiveInt | None = None


class RewardBlend(BaseModel):
    model_config = SECTION
    env: NonNegativeFloat | None = None
    event: NonNegativeFloat | None = None
    outcome: NonNegativeFloat | None = None


class JudgeOptions(BaseModel):
    model_config = SECTION
    event: bool | None = None
    outcome: bool | None = None
    provider: str | None = None
    model: str | None = None
    rubric_id: str | None = None
    rubric_overrides: dict[str, Any] | None = None
    tracks: StringList | None = None
    weights: dict[str, Any] | None = None
    max_concurrency: PositiveInt | None = None
    base_url: str | None = None  # embedded backend: an OpenAI-compatible judge server instead of the provider's


class JudgeSection(BaseModel):
    model_config = SECTION
    type: str | None = None
    timeout_s: PositiveFloat | None = None
    enabled: bool | None = None
    reward_blend: RewardBlend | None = None
    rubric: dict[str, Any] | None = None
    options: JudgeOptions | None = None


class RubricWeights(BaseModel):
    model_config = SECTION
    env: NonNegativeFloat = 1.0
    event: NonNegativeFloat = 0.0
    outcome: NonNegativeFloat = 0.0


class RubricSection(BaseModel):
    model_config = SECTION
    enabled: bool | None = None
    weights: RubricWeights | None = None


class RLConfig(BaseModel):
    """An RL training config (`synth-ai train --type rl`)."""

    model_config = SECTION
    algorithm: AlgorithmSection
    services: ServicesSection | None = None
    compute: ComputeSection | None = None
    topology: TopologySection | None = None
    vllm: VllmSection | None = None
    reference: ReferenceSection | None = None
    model: ModelSection | None = None
    policy: PolicySection | None = None
    lora: LoraSection | None = None
    rollout: RolloutSection | None = None
    evaluation: EvaluationSection | None = None
    training: TrainingSection | None = None
    rubric: RubricSection | None = None
    judge: JudgeSection | None = None
    tags: dict[str, Any] | None = None
    # experiment trackers (docs/tracking.md)
    logging: LoggingSection | None = None
    # not 0.2.17's schema, but its product pages' ([data].seeds); unused here (config.unused_keys)
    data: dict[str, Any] | None = None
