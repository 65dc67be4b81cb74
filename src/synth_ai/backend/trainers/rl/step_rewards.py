"""Per-turn (step) rewards: `[training].step_rewards_*` and `event_rewards_kind` (also under `[training.rewards]`),
read from a rollout response.

With `step_rewards_enabled` and a mode other than "off", every step (one decision: one `agent` op and the env ops
it drives) of an episode gets a reward r_t (t = 0 .. T-1, in the order of the trajectories' steps):

- mode "env_sparse": r_t = the step's `reward` (else `obs.reward_last_step`, else 0);
- mode "decision_stepwise": r_t = the decision's achievement delta, from the step's `decision_rewards` record
  (`info.meta.decision_rewards` or `info.decision_rewards`: {unique_delta, ach_delta}): `unique_delta` with
  `event_rewards_kind = "unique"` (default), `ach_delta` with "absolute"; a step without a record falls back to
  the length of `info.achievements_unlocked` (the bundled Crafter app's first-time unlocks), else 0.
- then shaping, with indicator_t = 1 when the decision unlocked something new (unique_delta > 0; in env_sparse
  mode, r_t > 0): r_t += indicator_lambda * indicator_t + beta * (T - t) * indicator_t.

`step_rewards_strategy` ("consistent" | "per_achievement") is how the reference's task apps compute their decision
records; the trainer checks it and forwards the settings to the task app in `policy.config.step_rewards`.
How the r_t become returns and advantages: `advantages.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from synth_ai.backend.trainers.common import _float
from synth_ai.errors import InvalidInputError

MODES = ("off", "env_sparse", "decision_stepwise")
KINDS = ("unique", "absolute")
STRATEGIES = {"consistent": "consistent", "simple": "consistent", "consistent_stepwise": "consistent",
              "decision_consistent": "consistent", "per_achievement": "per_achievement",
              "per-achievement": "per_achievement", "achievement_weighted": "per_achievement",
              "complex": "per_achievement"}


@dataclass(frozen=True)
class StepRewardSettings:
    enabled: bool = False
    mode: str = "off"
    kind: str = "unique"
    indicator_lambda: float = 0.0
    beta: float = 0.0
    strategy: str = "consistent"

    @property
    def active(self) -> bool:
        return self.enabled and self.mode != "off"

    def for_task_app(self) -> dict[str, Any]:
        """What the reference's task apps read from `policy.config.step_rewards`."""
        return {"enabled": self.enabled, "mode": self.mode, "strategy": self.strategy,
                "indicator_lambda": self.indicator_lambda, "step_beta": self.beta, "event_rewards_kind": self.kind}


def resolve_step_rewards(training: dict[str, Any]) -> StepRewardSettings:
    """`[training].step_rewards_*` / `event_rewards_kind`, with `[training.rewards]` (same names) taking precedence."""
    nested = training.get("rewards") if isinstance(training.get("rewards"), dict) else {}

    def pick(name: str) -> tuple[str, Any]:
        if nested.get(name) is not None:
            return f"[training.rewards].{name}", nested[name]
        return f"[training].{name}", training.get(name)

    where, enabled = pick("step_rewards_enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise InvalidInputError(f"{where} must be true or false (found {enabled!r}).")
    where, mode = pick("step_rewards_mode")
    mode = _choice(where, mode, MODES, "off")
    where, kind = pick("event_rewards_kind")
    kind = _choice(where, kind, KINDS, "unique")
    where, strategy = pick("step_rewards_strategy")
    if strategy is not None and (not isinstance(strategy, str) or strategy.strip().lower() not in STRATEGIES):
        raise InvalidInputError(f"{where} must be one of consistent, per_achievement (found {strategy!r}).")
    numbers = {}
    for name in ("step_rewards_indicator_lambda", "step_rewards_beta"):
        where, value = pick(name)
        numbers[name] = _float(where, value, low=0.0) if value is not None else 0.0
    if enabled and mode == "off":
        mode = "decision_stepwise"  # enabled without a mode: the reference's recommended one
    return StepRewardSettings(enabled=bool(enabled), mode=mode, kind=kind,
                              indicator_lambda=numbers["step_rewards_indicator_lambda"],
                              beta=numbers["step_rewards_beta"],
                              strategy=STRATEGIES[strategy.strip().lower()] if strategy else "consistent")


def _choice(where: str, value: Any, allowed: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in allowed:
        raise InvalidInputError(f"{where} must be one of {', '.join(allowed)} (found {value!r}).")
    return text


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _decision_record(step: dict[str, Any]) -> dict[str, Any] | None:
    info = step.get("info") if isinstance(step.get("info"), dict) else {}
    meta = info.get("meta") if isinstance(info.get("meta"), dict) else {}
    for holder in (meta, info):
        if isinstance(holder.get("decision_rewards"), dict):
            return holder["decision_rewards"]
    return None


def _decision_deltas(step: dict[str, Any]) -> tuple[float, float]:
    """(unique_delta, ach_delta) of one decision."""
    record = _decision_record(step)
    if record is not None:
        unique = _number(record.get("unique_delta")) or 0.0
        absolute = _number(record.get("ach_delta"))
        return unique, unique if absolute is None else absolute
    info = step.get("info") if isinstance(step.get("info"), dict) else {}
    unlocked = info.get("achievements_unlocked")
    count = float(len(unlocked)) if isinstance(unlocked, list) else 0.0
    return count, count


def steps_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for trajectory in response.get("trajectories") or []:
        if isinstance(trajectory, dict):
            steps.extend(s for s in trajectory.get("steps") or [] if isinstance(s, dict))
    return steps


def step_rewards(response: dict[str, Any], settings: StepRewardSettings) -> list[float]:
    """r_t for every step of the episode (empty when step rewards are off)."""
    if not settings.active:
        return []
    steps = steps_of(response)
    total = len(steps)
    out: list[float] = []
    for t, step in enumerate(steps):
        if settings.mode == "env_sparse":
            value = _number(step.get("reward"))
            obs = step.get("obs") if isinstance(step.get("obs"), dict) else {}
            reward = value if value is not None else (_number(obs.get("reward_last_step")) or 0.0)
            indicator = 1.0 if reward > 0 else 0.0
        else:
            unique, absolute = _decision_deltas(step)
            reward = unique if settings.kind == "unique" else absolute
            indicator = 1.0 if unique > 0 else 0.0
        out.append(reward + settings.indicator_lambda * indicator + settings.beta * (total - t) * indicator)
    return out
