"""A Crafter rollout request's knobs, checked before the world is generated: bad input is a 400 naming the field.
`RolloutSettings.from_request` is the one entry point."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synth_ai.taskapp.contracts import RolloutRequest
from synth_ai.taskapp.errors import RolloutError
from synth_ai.taskapp.inference import normalize_inference_url
from synth_ai.taskapp.siblings import load_sibling
from synth_ai.taskapp.vision import VisionSettings

crafter_env = load_sibling(__file__, "crafter_env")
MAX_ACTIONS_PER_CALL = load_sibling(__file__, "crafter_prompt").MAX_ACTIONS_PER_CALL

DEFAULT_SEED = 42
DEFAULT_MAX_TURNS = 10
DEFAULT_INFERENCE_TIMEOUT_S = 120.0


def _bad_request(message: str, code: str = "invalid_rollout_request") -> RolloutError:
    return RolloutError(message, status_code=400, code=code)


def _int_option(value: Any, name: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise _bad_request(f"{name} must be an integer, not {value!r}") from None
    if number < 1:
        raise _bad_request(f"{name} must be at least 1, not {number}")
    return number


def _timeout_option(value: Any, default: float) -> float:
    if value is None or value == "" or value == 0:
        return default
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise _bad_request(f"policy.config.timeout_s must be a number of seconds, not {value!r}") from None
    if not 0 < seconds < float("inf"):
        raise _bad_request(f"policy.config.timeout_s must be a positive number of seconds, not {value!r}")
    return seconds


def _agent_op_count(ops: list[Any]) -> int | None:
    """How many decisions the ops allow (None: no ops given, no bound from them)."""
    if not ops:
        return None
    count = 0
    for index, op in enumerate(ops):
        kind = op if isinstance(op, str) else (op.get("type") or op.get("op")) if isinstance(op, dict) else None
        if not isinstance(kind, str):
            raise _bad_request(f"ops[{index}] has no op type (expected 'agent' or 'env')")
        kind = kind.strip().lower()
        if kind in ("agent", "policy"):
            count += 1
        elif kind not in ("env", "environment"):
            raise _bad_request(f"ops[{index}] is {kind!r}; expected 'agent' or 'env'")
    return count


def _turn_budget(request: RolloutRequest) -> int:
    env_cfg = request.env.config or {}
    policy_cfg = request.policy.config or {}
    limits = [n for n in (
        _int_option(env_cfg.get("max_turns"), "env.config.max_turns"),
        _int_option(policy_cfg.get("max_turns"), "policy.config.max_turns"),
        _int_option(policy_cfg.get("max_llm_calls"), "policy.config.max_llm_calls"),
    ) if n is not None]
    turns = min(limits) if limits else DEFAULT_MAX_TURNS
    agent_ops = _agent_op_count(list(request.ops or []))
    return turns if agent_ops is None else min(turns, agent_ops)


@dataclass(frozen=True)
class RolloutSettings:
    """Everything a rollout request asks for, validated before the world is generated (bad input → 400)."""

    inference_url: str
    policy: dict[str, Any]
    vision: Any  # VisionSettings
    episode: Any  # crafter_env.EpisodeConfig
    max_turns: int
    max_actions: int
    timeout_s: float
    max_ops: int
    max_time_s: float

    @classmethod
    def from_request(cls, request: RolloutRequest) -> RolloutSettings:
        policy = dict(request.policy.config or {})
        raw_url = policy.get("inference_url")
        if not raw_url:
            raise _bad_request("policy.config.inference_url is required", code="missing_inference_url")
        try:
            vision = VisionSettings.from_policy_config(policy)
            episode = crafter_env.EpisodeConfig.from_request(request.env.seed, request.env.config,
                                                             default_seed=DEFAULT_SEED)
        except ValueError as exc:
            raise _bad_request(str(exc)) from exc
        max_actions = _int_option(policy.get("max_actions_per_call"), "policy.config.max_actions_per_call")
        return cls(
            inference_url=normalize_inference_url(str(raw_url)), policy=policy, vision=vision, episode=episode,
            max_turns=_turn_budget(request), max_actions=min(max_actions or MAX_ACTIONS_PER_CALL, MAX_ACTIONS_PER_CALL),
            timeout_s=_timeout_option(policy.get("timeout_s"), DEFAULT_INFERENCE_TIMEOUT_S),
            max_ops=request.safety.max_ops, max_time_s=request.safety.max_time_s,
        )
