"""Episode rewards from a rollout response, the returns they make, and group-normalised advantages.

Reward of an episode = w_env * env + w_event * event + w_outcome * outcome (`[rubric].weights`, default env only):
- env: the episode's return (`metrics.mean_return`, else the mean of `metrics.episode_returns`, else the sum of the
  step rewards);
- event: the sum of per-step rewards (`metrics.events_score` when the app gives one);
- outcome: `metrics.outcome_score` (else the last trajectory's `final.reward`).

Returns (`group_returns`): with step rewards on (`step_rewards.py`), the env part of turn t is the reward to go
sum_{k>=t} r_k (so turn t is credited with what followed it, and turn 0 with the whole episode); otherwise every
turn shares the episode's reward. With a `[judge]`, the return is
blend.env * (that) + blend.outcome * judge_outcome + blend.event * judge_event, where a rollout without a judge score
of a kind (the call failed) takes its group's mean score of that kind (0 when nobody in the group has one), so a
missing score moves its advantage neither way.

Advantages: within a group (same seed), A_i = (r_i - mean) / (std + eps) over the rollouts that succeeded; with
per-turn returns, separately for each turn index over the members that reached it. A group (or turn) whose returns
are all equal carries no signal and is skipped (counted); failed rollouts are not in any group.
"""

from __future__ import annotations

import math
from typing import Any

from synth_ai.backend.trainers.rl.step_rewards import step_rewards

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


def read_rewards(rollout: Any, response: Any, settings: Any) -> None:
    """Fill a rollout's reward parts, rubric-weighted reward and step rewards from its /rollout answer (raises
    InvalidRollout); the answer is kept while a judge still has to read it."""
    rollout.parts = reward_parts(response)
    rollout.reward = sum(settings.rubric_weights.get(k, 0.0) * v for k, v in rollout.parts.items())
    rollout.step_rewards = step_rewards(response, settings.step_rewards)
    rollout.response = response if settings.judge is not None else None


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def group_returns(members: list[Any], weights: dict[str, float], judge: Any = None,
                  step_rewards_on: bool = False) -> list[list[float]]:
    """Per member, its return per turn (one entry when returns are per episode). See the module's docstring."""
    judge_terms = [0.0] * len(members)
    env_scale = 1.0
    if judge is not None:
        env_scale = judge.blend["env"]
        for kind in judge.kinds:
            fill = _mean([m.judge[kind] for m in members if kind in m.judge])
            for i, m in enumerate(members):
                judge_terms[i] += judge.blend[kind] * m.judge.get(kind, fill)
    out = []
    for m, judged in zip(members, judge_terms):
        if not m.parts:  # scored without a /rollout answer: its reward is its env-side return
            out.append([env_scale * float(m.reward) + judged])
            continue
        fixed = weights.get("event", 0.0) * m.parts["event"] + weights.get("outcome", 0.0) * m.parts["outcome"]
        if step_rewards_on:
            to_go, total = [], 0.0
            for r in reversed(m.step_rewards or [0.0]):
                total += r
                to_go.append(total)
            env_parts = to_go[::-1]
        else:
            env_parts = [m.parts["env"]]
        out.append([env_scale * (weights.get("env", 0.0) * e + fixed) + judged for e in env_parts])
    return out


def turn_advantages(returns: list[list[float]]) -> list[list[float | None]] | None:
    """Advantages per member per turn (None where its turn had no signal), or None when the group has none."""
    out: list[list[float | None]] = [[None] * len(r) for r in returns]
    signal = False
    for t in range(max((len(r) for r in returns), default=0)):
        members = [i for i, r in enumerate(returns) if len(r) > t]
        advantages = group_advantages([returns[i][t] for i in members])
        if advantages is not None:
            signal = True
            for i, a in zip(members, advantages):
                out[i][t] = a
    return out if signal else None
