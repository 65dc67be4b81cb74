"""Scores of one rollout response and of a whole run, as synth-ai 0.2.17 computes them.

- official score: the first number of `metrics.mean_return`, `metrics.total_reward`, `metrics.outcome_score`,
  else the first step's reward; clamped to [0, 1].
- outcome: `metrics.outcome_score` (a seed counts as correct when it is >= 0.5).
- reward components: `metrics.details.reward_components`, the score of each reward function of an app that reports
  them ({name: number}, e.g. a verifiers environment's); other entries are left out, an app without it has none.
- Pearson r between each judge and the official score, over the seeds that have both (needs 2 pairs and
  non-constant values, else None).
"""

from __future__ import annotations

import math
from typing import Any

CORRECT_AT = 0.5


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def official_score(response: dict[str, Any]) -> float | None:
    metrics = response.get("metrics") if isinstance(response.get("metrics"), dict) else {}
    score = next((v for v in (_number(metrics.get(k)) for k in ("mean_return", "total_reward", "outcome_score"))
                  if v is not None), None)
    if score is None:
        try:
            score = _number(response["trajectories"][0]["steps"][0].get("reward"))
        except (LookupError, TypeError, AttributeError):
            score = None
    return None if score is None else min(1.0, max(0.0, score))


def outcome_score(response: dict[str, Any]) -> float | None:
    metrics = response.get("metrics") if isinstance(response.get("metrics"), dict) else {}
    return _number(metrics.get("outcome_score"))


def _details_table(response: dict[str, Any], key: str) -> dict[str, Any]:
    metrics = response.get("metrics") if isinstance(response.get("metrics"), dict) else {}
    details = metrics.get("details") if isinstance(metrics.get("details"), dict) else {}
    return details.get(key) if isinstance(details.get(key), dict) else {}


def reward_components(response: dict[str, Any]) -> dict[str, float]:
    scores = {str(name): _number(value) for name, value in _details_table(response, "reward_components").items()}
    return {name: score for name, score in scores.items() if score is not None}


def reward_weights(response: dict[str, Any], names: Any) -> dict[str, float]:
    """The weight of each of `names` where `metrics.details.reward_weights` gives one."""
    weights = _details_table(response, "reward_weights")
    found = {name: _number(weights.get(name)) for name in names}
    return {name: weight for name, weight in found.items() if weight is not None}


def mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def pearson(xs: list[float | None], ys: list[float | None]) -> float | None:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if x is not None and y is not None]
    if len(pairs) < 2:
        return None
    mx = sum(x for x, _ in pairs) / len(pairs)
    my = sum(y for _, y in pairs) / len(pairs)
    sxy = sum((x - mx) * (y - my) for x, y in pairs)
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    syy = sum((y - my) ** 2 for _, y in pairs)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)
