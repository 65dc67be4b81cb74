"""A small table of an iteration's rollouts (seed, reward, prompt, completion) as a `rl.rollouts.samples` event,
for the job's experiment trackers (synth_ai.tracking) and for `synth-ai jobs log` to replay. Only written when
the job reports to a tracker: the reporter's `sample_rows` (its `[logging].sample_rows`) bounds it, 0 or absent
writes nothing."""

from __future__ import annotations

from typing import Any

from synth_ai.backend.trainers.rl.types import Rollout
from synth_ai.tracking.tables import table_event_data

COLUMNS = ["iteration", "seed", "member", "reward", "turns", "prompt", "completion", "error"]


def report_samples(reporter: Any, it: int, rollouts: list[Rollout], tokenizer: Any) -> None:
    limit = int(getattr(reporter, "sample_rows", 0) or 0)
    if limit <= 0 or not rollouts:
        return
    rows = [[it, r.seed, r.index, r.reward, len(r.calls), _prompt(r), _completion(r, tokenizer), r.error]
            for r in rollouts[:limit]]
    reporter.event("rl.rollouts.samples", f"iteration {it}: {len(rows)} sample rollout(s) for the trackers",
                   table_event_data("rollouts", it, COLUMNS, rows))


def _prompt(rollout: Rollout) -> str:
    """The first call's last user message (the task as the policy saw it), text parts only."""
    if not rollout.calls:
        return ""
    messages = (rollout.calls[0].request or {}).get("messages") or []
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content or "")


def _completion(rollout: Rollout, tokenizer: Any) -> str:
    """The last call's first sampled completion, decoded."""
    if not rollout.calls or not rollout.calls[-1].samples:
        return ""
    ids = rollout.calls[-1].samples[0].completion_ids
    try:
        return str(tokenizer.decode(ids, skip_special_tokens=True))
    except Exception:  # noqa: BLE001 - a sample table is no reason to stop training
        return f"<{len(ids)} tokens>"
