"""The RL job payload (reference §2.2: `data.config` is the whole validated TOML) read into `RLSettings`.

Every value the trainer honours is read here, with the config key that holds it in the error message. Defaults
are chosen for GSPO on small batches and written down in docs/rl.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from synth_ai.backend.trainers.rl.judge import JudgeSettings, resolve_judge
from synth_ai.backend.trainers.rl.step_rewards import StepRewardSettings, resolve_step_rewards
from synth_ai.backend.trainers.sft.trainer import DEFAULT_LORA_TARGETS, FULL_KINDS, LORA_KINDS, _float, _int
from synth_ai.errors import InvalidInputError

DEFAULT_EPSILON_LOW = 3e-4  # GSPO paper's sequence-level clip range
DEFAULT_EPSILON_HIGH = 4e-4


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

    @property
    def base_model(self) -> str:  # the name common.save_final writes into the model card
        return self.model_id

    def fingerprint(self) -> dict[str, Any]:
        """What must not change between a checkpoint and its resume."""
        keep = ("model_id", "mode", "iterations", "batch_size", "group_size", "seed", "lora_r", "lora_targets")
        data = asdict(self)
        return {k: data[k] for k in keep}


def _table(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def resolve_rl_settings(spec: dict[str, Any]) -> RLSettings:
    data = spec.get("data") if isinstance(spec.get("data"), dict) else {}
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    model_id = data.get("model") or data.get("base_model") or spec.get("model")
    if not isinstance(model_id, str) or not model_id.strip():
        raise InvalidInputError("The RL job names no model.", hint="Set [model].base or [model].source.")
    task_url = data.get("endpoint_base_url") or _table(config, "services").get("task_url")
    if not isinstance(task_url, str) or not task_url.startswith(("http://", "https://")):
        raise InvalidInputError(f"The RL job has no task app URL (found {task_url!r}).",
                                hint="Set [services].task_url or pass --task-url.")
    model_cfg = _table(config, "model") or _table(config, "policy")
    training = _table(config, "training")
    rollout = _table(config, "rollout")
    evaluation = _table(config, "evaluation")
    kind = str(model_cfg.get("trainer_mode") or "full").strip().lower()
    if kind in FULL_KINDS:
        mode = "full"
    elif kind in LORA_KINDS:
        mode = "lora"
    else:
        raise InvalidInputError(f"[model].trainer_mode must be 'full' or 'lora' (found {kind!r}).")

    def need(table: dict[str, Any], name: str, key: str, default: Any = None, minimum: int = 1) -> int:
        value = table.get(key, default)
        if value is None:
            raise InvalidInputError(f"[{name}].{key} is required for RL training.")
        return _int(f"[{name}].{key}", value, minimum=minimum)

    iterations = need(training, "training", "num_epochs", 1) * need(training, "training", "iterations_per_epoch", 1)
    concurrency = need(rollout, "rollout", "max_concurrent_rollouts", 4)
    if training.get("async_semaphore_max") is not None:
        concurrency = min(concurrency, need(training, "training", "async_semaphore_max"))
    policy_config = dict(rollout.get("policy_config") or {})
    for key in ("thinking_mode", "thinking_budget", "use_vision", "image_only_mode", "max_images_per_step"):
        if rollout.get(key) is not None:
            policy_config.setdefault(key, rollout[key])
    step_rewards = resolve_step_rewards(training)
    if step_rewards.enabled:  # the reference's task apps read these to emit decision records
        policy_config.setdefault("step_rewards", step_rewards.for_task_app())
    temperature = _float("[rollout.policy_config].temperature", policy_config.get("temperature", 1.0), low=0.0)
    if temperature <= 0:
        raise InvalidInputError("[rollout.policy_config].temperature must be > 0 for RL (found 0): GSPO needs "
                                "sampled, varied rollouts.", hint="Use temperature = 1.0.")
    policy_config["temperature"] = temperature
    max_images = rollout.get("max_images_per_step")
    lora = dict(_table(config, "lora") or _table(training, "lora"))
    rubric = _table(config, "rubric")
    weights = {"env": 1.0, "event": 0.0, "outcome": 0.0}
    if rubric.get("enabled", True) is not False and isinstance(rubric.get("weights"), dict):
        for key in weights:
            if rubric["weights"].get(key) is not None:
                weights[key] = _float(f"[rubric.weights].{key}", rubric["weights"][key], low=0.0)
    eval_seeds: list[int] = []
    if evaluation:
        from synth_ai.config.fields import parse_seeds

        try:
            eval_seeds = parse_seeds(evaluation.get("seeds") or [])
        except ValueError as exc:  # pydantic's error type is a ValueError
            raise InvalidInputError(f"[evaluation].seeds: {exc}") from None
        if evaluation.get("instances"):
            eval_seeds = eval_seeds[: int(evaluation["instances"])]
    eval_policy = {k: evaluation[k] for k in ("thinking_mode", "thinking_budget") if evaluation.get(k) is not None}
    reference = str(_table(config, "reference").get("placement") or "none").lower() != "none"
    kl_coef = _float("[training].kl_coef", training.get("kl_coef", 0.0), low=0.0)
    weight_sync = _table(training, "weight_sync")
    sync_interval = training.get("weight_sync_interval", weight_sync.get("interval", 1))
    return RLSettings(
        job_id=str(spec.get("job_id") or "local"), model_id=model_id.strip(), task_url=task_url.rstrip("/"),
        mode=mode, iterations=iterations, batch_size=need(training, "training", "batch_size", 4),
        group_size=need(training, "training", "group_size", 4),
        learning_rate=_float("[training].learning_rate", training.get("learning_rate", 1e-5), low=0.0,
                             strict_low=True),
        max_turns=need(rollout, "rollout", "max_turns", training.get("max_turns", 1)), concurrency=concurrency,
        weight_sync_interval=_int("[training].weight_sync_interval", sync_interval),
        log_interval=need(training, "training", "log_interval", 1),
        gradient_accumulation_steps=need(training, "training", "gradient_accumulation_steps", 1),
        micro_batch=(need(training, "training", "max_accumulated_minibatch")
                     if training.get("max_accumulated_minibatch") else None),
        epsilon_low=_float("[training].clip_epsilon_low", training.get("clip_epsilon_low", DEFAULT_EPSILON_LOW),
                           low=0.0, strict_low=True),
        epsilon_high=_float("[training].clip_epsilon_high",
                            training.get("clip_epsilon_high", DEFAULT_EPSILON_HIGH), low=0.0, strict_low=True),
        kl_coef=kl_coef, reference=reference and kl_coef > 0,
        max_grad_norm=_float("[training].max_grad_norm", training.get("max_grad_norm", 1.0), low=0.0),
        weight_decay=_float("[training].weight_decay", training.get("weight_decay", 0.0), low=0.0),
        seed=_int("[training].seed", training.get("seed", 0), minimum=0),
        checkpoint_interval=need(training, "training", "checkpoint_interval", 5),
        rollout_timeout_s=_float("[training].rollout_timeout_s", training.get("rollout_timeout_s", 300.0),
                                 low=0.0, strict_low=True),
        rollout_retries=_int("[training].rollout_retries", training.get("rollout_retries", 2), minimum=0),
        env_name=rollout.get("env_name"), policy_name=rollout.get("policy_name"),
        env_config=dict(rollout.get("env_config") or {}), policy_config=policy_config,
        ops=list(rollout.get("ops") or []), temperature=temperature,
        max_images_per_step=_image_limit(max_images, model_id.strip()),
        rubric_weights=weights, step_rewards=step_rewards, judge=resolve_judge(config),
        eval_every=int(evaluation.get("every_n_iters") or 0) if eval_seeds else 0,
        eval_seeds=eval_seeds, eval_policy_config=eval_policy,
        lora_r=_int("[lora].r", lora.get("r", 16)), lora_alpha=_float("[lora].alpha", lora.get("alpha", 32.0),
                                                                       low=0.0, strict_low=True),
        lora_dropout=0.0,  # dropout would make the on-policy ratio differ from 1; RL trains without it
        lora_targets=lora.get("target_modules") or DEFAULT_LORA_TARGETS,
        label=model_cfg.get("label"),
    )


def _image_limit(value: Any, model_id: str) -> int | None:
    """`[rollout].max_images_per_step` (at least 1, as the client's config schema says); unset, the model's own
    per-turn limit from the registry (one for Qwen3-VL), and no limit for a model the registry does not know."""
    if value is not None:
        return _int("[rollout].max_images_per_step", value, minimum=1)
    from synth_ai.models.registry import find_model

    parts = model_id.split(":")
    info = find_model(parts[1] if parts[0] in {"ft", "rl"} and len(parts) >= 3 else model_id)
    return (info.max_images_per_message or None) if info is not None else None
