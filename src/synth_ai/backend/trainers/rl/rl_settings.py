"""The RL job payload (reference §2.2: `data.config` is the whole validated TOML) read into `RLSettings`.

Every value the trainer honours is read here; a bad one is refused with the config key that holds it, by the
config models' own rule. Defaults are chosen for GSPO on small batches and written down in docs/rl.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from synth_ai.backend.trainers.common import DEFAULT_LORA_TARGETS, FULL_KINDS, LORA_KINDS, first_set
from synth_ai.backend.trainers.optimizer import DEFAULT_OPTIMIZER_STATES
from synth_ai.backend.trainers.rl.judge import JudgeSettings, require_judge_key, resolve_judge
from synth_ai.backend.trainers.rl.step_rewards import StepRewardSettings, resolve_step_rewards
from synth_ai.config.common import LoraSection
from synth_ai.config.job_parts import check_part, given, lenient
from synth_ai.config.job_specs import RLJobSpec
from synth_ai.config.rl_schema import RLConfig, RolloutSection, TrainingSection
from synth_ai.errors import InvalidInputError
from synth_ai.taskapp.reachability import DEFAULT_WAIT_S

DEFAULT_EPSILON_LOW = 3e-4  # GSPO paper's sequence-level clip range
DEFAULT_EPSILON_HIGH = 4e-4
DEFAULT_MAX_STALENESS = 0  # synchronous unless asked: the same config keeps giving the same curve (docs/rl.md)
DEFAULT_IMPORTANCE_SAMPLING_CAP = 2.0  # truncated IS cap C (off_policy.py); the usual choice of TIS papers
# twice the built-in engine's running batch (32 rows): it stays full while half the rollouts are in their task app's
# step, and a large batch neither floods the task app nor overflows the engine's queue of 256 calls (429s)
DEFAULT_MAX_CONCURRENCY = 64
DEFAULT_MICRO_BATCH_TOKENS = 8192  # Qwen3-4B full at 8k tokens a pass fits one 80 GB GPU (docs/decisions.md)


@dataclass
class RLSettings:
    job_id: str
    model_id: str  # what the policy starts from: a base id or an ft:/rl: id of this backend
    task_url: str
    mode: str  # "full" | "lora"
    iterations: int
    batch_size: int  # seeds per iteration
    group_size: int  # rollouts per seed
    learning_rate: float
    max_turns: int
    concurrency: int
    weight_sync_interval: int
    log_interval: int
    gradient_accumulation_steps: int = 1
    micro_batch: int | None = None  # samples per forward/backward (max_accumulated_minibatch)
    epsilon_low: float = DEFAULT_EPSILON_LOW
    epsilon_high: float = DEFAULT_EPSILON_HIGH
    kl_coef: float = 0.0
    reference: bool = False
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    seed: int = 0
    checkpoint_interval: int = 5
    rollout_timeout_s: float = 300.0
    rollout_retries: int = 2
    task_app_wait_s: float = DEFAULT_WAIT_S  # waiting out an unreachable task app (rl.taskapp_wait)
    env_name: str | None = None
    policy_name: str | None = None
    env_config: dict[str, Any] = field(default_factory=dict)
    policy_config: dict[str, Any] = field(default_factory=dict)
    ops: list[Any] = field(default_factory=list)
    temperature: float = 1.0
    max_images_per_step: int | None = None
    rubric_weights: dict[str, float] = field(default_factory=lambda: {"env": 1.0, "event": 0.0, "outcome": 0.0})
    step_rewards: StepRewardSettings = field(default_factory=StepRewardSettings)
    judge: JudgeSettings | None = None
    eval_every: int = 0
    eval_seeds: list[int] = field(default_factory=list)
    eval_policy_config: dict[str, Any] = field(default_factory=dict)
    lora_r: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    lora_targets: Any = DEFAULT_LORA_TARGETS
    label: str | None = None
    max_staleness: int = DEFAULT_MAX_STALENESS  # optimiser steps a sample may lag the weights it trains
    importance_sampling_cap: float = DEFAULT_IMPORTANCE_SAMPLING_CAP
    # issue 38 items 4-5: the reference model's device and the optimiser states (trainers/optimizer.py)
    reference_device: str = "auto"  # "auto": beside the policy; "cpu": in host memory, the batch moved there
    optimizer_states: str = DEFAULT_OPTIMIZER_STATES
    # issue 38 item 1: log-probs through the LM head in vocabulary blocks (ml.token_logprobs); False: materialised
    chunked_logprobs: bool = True
    # update memory (issue 38 items 2-3): None = on when the policy trains on CUDA (`rl.policy` decides)
    activation_checkpointing: bool | None = None
    micro_batch_tokens: int = DEFAULT_MICRO_BATCH_TOKENS  # padded prompt + completion tokens per forward/backward
    # issue 39 item 1: None (every rank holds the whole policy) | "full_shard" | "shard_grad_op" (`rl.sharded_policy`)
    fsdp: str | None = None

    @property
    def asynchronous(self) -> bool:
        """Rollouts run in a pool beside the update (`rollout_pool`), corrected by `off_policy`."""
        return self.max_staleness > 0

    @property
    def base_model(self) -> str:  # the name common.save_final writes into the model card
        return self.model_id

    def fingerprint(self) -> dict[str, Any]:
        """What must not change between a checkpoint and its resume."""
        keep = ("model_id", "mode", "iterations", "batch_size", "group_size", "seed", "lora_r", "lora_targets")
        data = asdict(self)
        return {k: data[k] for k in keep}


def resolve_rl_settings(spec: RLJobSpec | Mapping[str, Any]) -> RLSettings:
    """Read an RL job payload into `RLSettings`. The config's types and bounds are the config models'
    (`synth_ai.config.rl_schema`, checked by `synth_ai.config.job_parts`); what is checked here is what only this
    trainer decides (the training mode, a sampling temperature above zero, step rewards, the judge)."""
    spec = RLJobSpec.of(spec)
    raw = spec.config
    config = check_part(RLConfig, raw)
    model_id = spec.model_id
    if model_id is None:
        raise InvalidInputError("The RL job names no model.", hint="Set [model].base or [model].source.")
    task_url = spec.task_url or (config.services.task_url if config.services else None)
    if not isinstance(task_url, str) or not task_url.startswith(("http://", "https://")):
        raise InvalidInputError(f"The RL job has no task app URL (found {task_url!r}).",
                                hint="Set [services].task_url or pass --task-url.")
    training = config.training or lenient(TrainingSection)()
    rollout = config.rollout or lenient(RolloutSection)()
    model_cfg = next((t for t in (config.model, config.policy) if t is not None and given(t)), None)
    step_rewards = resolve_step_rewards(given(training))
    policy_config = _policy_config(rollout, step_rewards)
    kl_coef = first_set(training.kl_coef, 0.0)
    _refuse_async_conflict(raw)
    _refuse_topology_conflict(raw)  # issue 39 item 2: the split topology leaves a GPU to train on
    batch_size, group_size = training.batch_size or 4, training.group_size or 4
    concurrency = rollout.max_concurrent_rollouts or default_concurrency(batch_size, group_size)
    return RLSettings(
        job_id=spec.job_id, model_id=model_id, task_url=task_url.rstrip("/"),
        mode=_mode(model_cfg.trainer_mode if model_cfg else None),
        iterations=(training.num_epochs or 1) * (training.iterations_per_epoch or 1),
        batch_size=batch_size, group_size=group_size,
        learning_rate=training.learning_rate or 1e-5, max_turns=rollout.max_turns or training.max_turns or 1,
        concurrency=min(concurrency, training.async_semaphore_max or concurrency),
        weight_sync_interval=training.weight_sync_interval or (training.weight_sync.interval
                                                               if training.weight_sync else None) or 1,
        log_interval=training.log_interval or 1,
        gradient_accumulation_steps=training.gradient_accumulation_steps or 1,
        micro_batch=training.max_accumulated_minibatch,
        epsilon_low=training.clip_epsilon_low or DEFAULT_EPSILON_LOW,
        epsilon_high=training.clip_epsilon_high or DEFAULT_EPSILON_HIGH,
        kl_coef=kl_coef, reference=kl_coef > 0 and _reference_on(config),
        max_grad_norm=first_set(training.max_grad_norm, 1.0), weight_decay=first_set(training.weight_decay, 0.0),
        seed=first_set(training.seed, 0), checkpoint_interval=training.checkpoint_interval or 5,
        rollout_timeout_s=training.rollout_timeout_s or 300.0, rollout_retries=first_set(training.rollout_retries, 2),
        task_app_wait_s=first_set(training.task_app_wait_s, DEFAULT_WAIT_S),
        env_name=rollout.env_name, policy_name=rollout.policy_name, env_config=dict(rollout.env_config or {}),
        policy_config=policy_config, ops=list(rollout.ops or []), temperature=policy_config["temperature"],
        max_images_per_step=_image_limit(rollout.max_images_per_step, model_id.strip()),
        rubric_weights=_rubric_weights(config), step_rewards=step_rewards, judge=resolve_judge(raw),
        **_evaluation(config), **_lora(config.lora or training.lora),
        label=model_cfg.label if model_cfg else None,
        max_staleness=first_set(training.max_staleness, DEFAULT_MAX_STALENESS),
        importance_sampling_cap=first_set(training.importance_sampling_cap, DEFAULT_IMPORTANCE_SAMPLING_CAP),
        reference_device=training.reference_device or "auto",
        optimizer_states=training.optimizer_states or DEFAULT_OPTIMIZER_STATES,
        # issue 38 item 1
        chunked_logprobs=first_set(training.chunked_logprobs, True),
        activation_checkpointing=training.activation_checkpointing,
        micro_batch_tokens=_token_budget(config, training.micro_batch_tokens),
        # issue 39 item 1
        fsdp=(training.fsdp_sharding_strategy or "FULL_SHARD").lower() if training.fsdp else None,
    )


def default_concurrency(batch_size: int, group_size: int) -> int:
    """Rollouts in flight when `[rollout].max_concurrent_rollouts` is unset: every rollout of an iteration, so that
    their policy calls decode together in the engine's running batch, up to DEFAULT_MAX_CONCURRENCY
    (docs/decisions.md has the measurements)."""
    return min(batch_size * group_size, DEFAULT_MAX_CONCURRENCY)


def _refuse_async_conflict(raw: dict[str, Any]) -> None:
    """An asynchronous setting this trainer cannot honour is refused (never run synchronously instead)."""
    from synth_ai.config.rl import async_conflict

    _refuse(async_conflict(raw.get("training") if isinstance(raw.get("training"), dict) else {}))


def _refuse_topology_conflict(raw: dict[str, Any]) -> None:
    """Issue 39 item 2: `[topology].gpus_for_vllm` that takes every GPU of `[compute]` is refused at create time,
    with the key path (`config.rl.topology_conflict`, the check `config validate` makes)."""
    from synth_ai.config.rl import topology_conflict

    _refuse(topology_conflict(raw))


def _refuse(conflict: tuple[tuple[str, ...], str, Any, str] | None) -> None:
    """A config check's (key path, what is wrong, found, fix) as the create-time refusal."""
    if conflict is not None:
        path, message, found, fix = conflict
        key = f"[{'.'.join(path[:-1])}].{path[-1]}"
        raise InvalidInputError(f"{key}: {message} (found {found!r}).", hint=fix[0].upper() + fix[1:] + ".",
                                details={"field": "data.config." + ".".join(path)})


def check_rl_job(spec: RLJobSpec | Mapping[str, Any]) -> RLSettings:
    """The create-time check of an RL job: its settings, and a judge this backend could call (the provider's key
    in its environment). A refusal's `details` name the body field and, for the judge, the 400's code."""
    spec = RLJobSpec.of(spec)
    config = spec.config
    try:
        resolve_step_rewards(config.get("training") if isinstance(config.get("training"), dict) else {})
    except InvalidInputError as exc:
        raise InvalidInputError(exc.message, hint=exc.hint, details={"field": "data.config.training"}) from None
    try:
        require_judge_key(config)
    except InvalidInputError as exc:
        code = "missing_judge_api_key" if "is not set in the backend's environment" in exc.message else "invalid_judge"
        raise InvalidInputError(exc.message, hint=exc.hint, details={"field": "data.config.judge", "code": code}) \
            from None
    settings = resolve_rl_settings(spec)
    # issue 39 item 1: a policy that cannot train on its [compute] GPUs, data-parallel or sharded
    from synth_ai.backend.trainers.rl.sharding_plan import refuse_what_cannot_fit
    from synth_ai.backend.trainers.rl.topology import training_gpus_of

    gpu_count = spec.compute.get("gpu_count") if isinstance(spec.compute.get("gpu_count"), int) else 1
    refuse_what_cannot_fit(settings.model_id, settings.mode, bool(settings.fsdp), spec.compute,
                           training_gpus_of(spec, gpu_count, gpu_count))
    return settings


def _token_budget(config: RLConfig, asked: int | None) -> int:
    """`[training].micro_batch_tokens`; unset, the default, raised to the longest sample the config allows (one runs
    whole in a forward/backward). Set below that, refused: the numbers, and the two ways out."""
    longest, key, what = _longest_sample(config)
    if asked is None:
        return max(DEFAULT_MICRO_BATCH_TOKENS, longest or 0)
    if longest is not None and longest > asked:
        raise InvalidInputError(
            f"[training].micro_batch_tokens = {asked} is smaller than one sample may be: {key} = {longest} lets "
            f"{what} reach {longest} tokens, and a sample runs whole in one forward/backward.",
            hint=f"Raise [training].micro_batch_tokens to at least {longest}, or lower {key}.",
            details={"field": "data.config.training.micro_batch_tokens"})
    return asked


def _longest_sample(config: RLConfig) -> tuple[int | None, str, str]:
    """(tokens, key, what they bound): the longest sample the config allows. `[vllm].max_model_len` bounds prompt +
    completion; without it `[rollout.policy_config].max_tokens` bounds the completion alone (its prompt comes on
    top, unbounded); (None, "", "") when neither is set."""
    if config.vllm is not None and config.vllm.max_model_len:
        return config.vllm.max_model_len, "[vllm].max_model_len", "a prompt and its completion"
    policy = config.rollout.policy_config if config.rollout is not None else None
    if policy is not None and policy.max_tokens:
        return policy.max_tokens, "[rollout.policy_config].max_tokens", "a completion alone (before its prompt)"
    return None, "", ""


def _mode(trainer_mode: str | None) -> str:
    kind = str(trainer_mode or "full").strip().lower()
    if kind in FULL_KINDS:
        return "full"
    if kind in LORA_KINDS:
        return "lora"
    raise InvalidInputError(f"[model].trainer_mode must be 'full' or 'lora' (found {kind!r}).")


def _policy_config(rollout: Any, step_rewards: StepRewardSettings) -> dict[str, Any]:
    """What each rollout asks the task app's policy for: [rollout.policy_config], with the [rollout] keys it
    leaves unset, and the step-reward settings the reference's task apps read to emit decision records."""
    policy_config = given(rollout.policy_config) if rollout.policy_config is not None else {}
    for key in ("thinking_mode", "thinking_budget", "use_vision", "image_only_mode", "max_images_per_step"):
        if getattr(rollout, key) is not None:
            policy_config.setdefault(key, getattr(rollout, key))
    if step_rewards.enabled:
        policy_config.setdefault("step_rewards", step_rewards.for_task_app())
    temperature = float(first_set(policy_config.get("temperature"), 1.0))
    if temperature <= 0:
        raise InvalidInputError(f"[rollout.policy_config].temperature must be > 0 for RL (found {temperature:g}): "
                                "GSPO needs sampled, varied rollouts.", hint="Use temperature = 1.0.")
    policy_config["temperature"] = temperature
    return policy_config


def _reference_on(config: Any) -> bool:
    placement = config.reference.placement if config.reference else None
    return str(placement or "none").lower() != "none"


def _rubric_weights(config: Any) -> dict[str, float]:
    weights = {"env": 1.0, "event": 0.0, "outcome": 0.0}
    rubric = config.rubric
    if rubric is not None and rubric.enabled is not False and rubric.weights is not None:
        weights.update({k: v for k, v in given(rubric.weights).items() if k in weights and v is not None})
    return weights


def _evaluation(config: Any) -> dict[str, Any]:
    evaluation = config.evaluation
    if evaluation is None or not given(evaluation):
        return {}
    if not evaluation.seeds:
        raise InvalidInputError("[evaluation].seeds must list at least one seed (found none).")
    seeds = evaluation.seeds[: evaluation.instances] if evaluation.instances else list(evaluation.seeds)
    policy = {k: getattr(evaluation, k) for k in ("thinking_mode", "thinking_budget")
              if getattr(evaluation, k) is not None}
    return {"eval_every": evaluation.every_n_iters or 0, "eval_seeds": seeds, "eval_policy_config": policy}


def _lora(lora: Any) -> dict[str, Any]:
    lora = lora or lenient(LoraSection)()
    return {"lora_r": lora.r or 16, "lora_alpha": lora.alpha or 32.0,
            "lora_dropout": 0.0,  # dropout would make the on-policy ratio differ from 1; RL trains without it
            "lora_targets": lora.target_modules or DEFAULT_LORA_TARGETS}


def _image_limit(value: int | None, model_id: str) -> int | None:
    """`[rollout].max_images_per_step` (at least 1, as the config schema says); unset, the model's own per-turn
    limit from the registry (one for Qwen3-VL), and no limit for a model the registry does not know."""
    if value is not None:
        return value
    from synth_ai.models.registry import find_model

    parts = model_id.split(":")
    info = find_model(parts[1] if parts[0] in {"ft", "rl"} and len(parts) >= 3 else model_id)
    return (info.max_images_per_message or None) if info is not None else None
