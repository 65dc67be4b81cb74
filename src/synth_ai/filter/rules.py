"""The selection rules: which sessions of a trace database may become SFT examples.

Each rule looks at one session (its metadata, creation time and outcome reward) and either passes it or names
itself as the reason for the drop; the flow counts drops per rule. The semantics follow synth-ai 0.2.17's
`filter`: metadata `task_split`, `task_id`, `model`; `outcome_rewards.total_reward` as the official score (a
missing score fails a minimum but not a maximum); `metadata.judge_scores[name]` for judge thresholds.

Two additions: a session marked as errored or timed out never passes (see `is_errored`), and when a session has
no outcome reward row its `metadata.official_score` (what `eval` stores) stands in as the official score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from synth_ai.config.filter import parse_instant as parse_created_at  # the same reading as the config's bounds
from synth_ai.filter.options import FilterOptions

__all__ = ["ERROR_STATUSES", "RULES", "Candidate", "build_rules", "is_errored", "parse_created_at",
           "score_in_range"]

# Rule names, in the order they are applied (and printed).
RULES: tuple[str, ...] = ("errored", "splits", "task_ids", "models", "created_at", "official_score",
                          "judge_scores")

# `metadata.status` values meaning the rollout did not finish normally (compared case-insensitively).
ERROR_STATUSES = frozenset({"error", "errored", "failed", "failure", "exception", "timeout", "timed_out",
                            "cancelled", "canceled", "aborted"})


def is_errored(metadata: Mapping[str, Any]) -> bool:
    """A session is errored when its metadata says so: `status` in `ERROR_STATUSES`, a non-empty `error`, or a
    true `timed_out`. `eval` writes these for seeds whose rollout failed; task apps store no failed rollout."""
    status = metadata.get("status")
    if isinstance(status, str) and status.strip().lower() in ERROR_STATUSES:
        return True
    error = metadata.get("error")
    if error not in (None, False, "", {}, []):
        return True
    return metadata.get("timed_out") is True


@dataclass(frozen=True, slots=True)
class Candidate:
    """What the rules see of one session."""

    metadata: Mapping[str, Any]
    created_at: datetime | None
    official_score: Any  # the outcome reward's total_reward, or metadata.official_score, or None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def score_in_range(value: Any, low: float | None, high: float | None) -> bool:
    """A missing score passes only when there is no minimum; a non-numeric one never passes."""
    if value is None:
        return low is None
    number = _number(value)
    if number is None:
        return False
    return (low is None or number >= low) and (high is None or number <= high)


def build_rules(options: FilterOptions) -> list[tuple[str, Callable[[Candidate], bool]]]:
    """The active rules, as (name, passes) in `RULES` order; rules with nothing configured are left out."""
    rules: list[tuple[str, Callable[[Candidate], bool]]] = [("errored", lambda c: not is_errored(c.metadata))]
    for name, key, wanted in (("splits", "task_split", options.splits), ("task_ids", "task_id", options.task_ids),
                              ("models", "model", options.models)):
        if wanted:
            rules.append((name, _member_rule(key, wanted)))
    low, high = options.min_created_at, options.max_created_at
    if low is not None or high is not None:
        rules.append(("created_at", lambda c: c.created_at is not None
                      and (low is None or c.created_at >= low) and (high is None or c.created_at <= high)))
    if options.wants_official_score:
        rules.append(("official_score", lambda c: score_in_range(
            c.official_score, options.min_official_score, options.max_official_score)))
    if options.min_judge_scores or options.max_judge_scores:
        rules.append(("judge_scores", lambda c: _judges_pass(c.metadata, options)))
    return rules


def _member_rule(key: str, wanted: frozenset[str]) -> Callable[[Candidate], bool]:
    def passes(c: Candidate) -> bool:
        value = c.metadata.get(key)
        if isinstance(value, str):
            return value in wanted
        # TOML lists hold strings; a number stored in metadata (a seed-like task id) matches its text form
        return isinstance(value, (int, float)) and not isinstance(value, bool) and str(value) in wanted

    return passes


def _judges_pass(metadata: Mapping[str, Any], options: FilterOptions) -> bool:
    scores = metadata.get("judge_scores")
    scores = scores if isinstance(scores, Mapping) else {}
    return (all(score_in_range(scores.get(name), low, None) for name, low in options.min_judge_scores.items())
            and all(score_in_range(scores.get(name), None, high) for name, high in options.max_judge_scores.items()))
