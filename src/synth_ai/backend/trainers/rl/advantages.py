"""Episode rewards from a rollout response, and group-normalised advantages.

Reward of an episode = w_env * env + w_event * event + w_outcome * outcome (`[rubric].weights`, default env only):
- env: the episode's return (`metrics.mean_return`, else the mean of `metrics.episode_returns`, else the sum of the
  step rewards);
- event: the sum of per-step rewards (`metrics.events_score` when the app gives one);
- outcome: `metrics.outcome_score` (else the last trajectory's `final.reward`).

Advantages: within a group (same seed), A_i = (r_i - mean) / (std + eps) over the rollouts that succeeded. A group
whose rewards are all equal carries no signal and is skipped (counted); failed rollouts are not in any group.
"""

from __future__ import annotations

import math
from typing import Any

ZERO_STD = 1e-6
NORM_EPS = 1e-4


class InvalidRollout(ValueError):
    """The task app answered 200 with something that is not a rollout response."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def reward_parts(response: Any) -> dict[str, float]:
    if not isinstance(response, dict):
        raise InvalidRollout(f"the /rollout answer is {type(response).__name__}, not a JSON object")
    metrics = response.get("metrics")
    trajectories = response.get("trajectories")
    if not isinstance(metrics, dict) and not isinstance(trajectories, list):
        raise InvalidRollout("the /rollout answer has neither `metrics` nor `trajectories`")
    metrics = metrics if isinstance(metrics, dict) else {}
    steps: list[float] = []
    finals: list[float] = []
    for trajectory in trajectories if isinstance(trajectories, list) else []:
        if not isinstance(trajectory, dict):
            raise InvalidRollout("a trajectory in the /rollout answer is not an object")
        for step in trajectory.get("steps") or []:
            value = _number(step.get("reward")) if isinstance(step, dict) else None
            if value is not None:
                steps.append(value)
        final = trajectory.get("final")
        if isinstance(final, dict) and _number(final.get("reward")) is not None:
            finals.append(float(final["reward"]))
    env = _number(metrics.get("mean_return"))
    returns = metrics.get("episode_returns")
    if env is None and isinstance(returns, list) and returns and all(_number(r) is not None for r in returns):
        env = sum(float(r) for r in returns) / len(returns)
    if env is None and steps:
        env = sum(steps)
    if env is None:
        raise InvalidRollout("the /rollout answer has no reward (metrics.mean_return, episode_returns or step "
                             "rewards)")
    event = _number(metrics.get("events_score"))
    outcome = _number(metrics.get("outcome_score"))
    return {"env": env, "event": event if event is not None else sum(steps),
            "outcome": outcome if outcome is not None else (finals[-1] if finals else env)}


def episode_reward(response: Any, weights: dict[str, float]) -> float:
    parts = reward_parts(response)
    return sum(weights.get(k, 0.0) * parts[k] for k in parts)


def group_advantages(rewards: list[float]) -> list[float] | None:
    """Normalised advantages of one group, or None when its rewards do not vary (or it has < 2 members)."""
    if len(rewards) < 2:
        return None
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    if std < ZERO_STD:
        return None
    return [(r - mean) / (std + NORM_EPS) for r in rewards]
