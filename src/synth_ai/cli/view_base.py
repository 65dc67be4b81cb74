"""What every view of a followed job shares (see `synth_ai.cli.follow_view` and `synth_ai.cli.progress_view`):
which events are hidden by default, how one update reads as a line of text, and the latest value of each headline
metric for the summary printed after the job ends."""

from __future__ import annotations

import time
from typing import Any

from synth_ai.client.follow import Update

# Event types synth-ai 0.2.17 hid by default (noise next to the metrics that carry the same numbers).
HIDDEN_EVENTS = {
    "sft.progress", "sft.loss", "sft.upstream.status", "sft.created", "sft.pricing.check.requested",
    "sft.pricing.check.allowed", "sft.stage", "snapshot.fetch", "sft.running", "sft.status", "sft.worker.alive",
    "sft.dispatch.selected", "sft.config.prepared", "sft.strategy.selected", "sft.training.args",
}
# What the summary after the job reports.
SUMMARY_METRICS = ("reward.mean", "eval.mean_return", "loss", "train.loss", "val.loss")
# RL events whose numbers are the point: shown after the message when it does not already carry them.
NUMERIC_EVENTS = {"rl.train.step", "rl.eval.summary"}


def stamp() -> str:
    """The wall-clock time each printed line starts with."""
    return time.strftime("%H:%M:%S")


class View:
    """What every view remembers: the latest value of each metric, for the summary after the job ends."""

    def __init__(self) -> None:
        self.latest: dict[str, tuple[int, float]] = {}

    def remember(self, update: Update) -> None:
        data = update.data
        value = data.get("value")
        if update.kind == "metric" and isinstance(value, (int, float)) and not isinstance(value, bool):
            step = data.get("step") if isinstance(data.get("step"), int) else -1
            if step >= self.latest.get(str(data.get("name")), (-2, 0.0))[0]:
                self.latest[str(data.get("name"))] = (step, float(value))

    def summary(self) -> list[str]:
        return [f"{name} = {number(value)} (step {step})" for name in SUMMARY_METRICS
                if name in self.latest for step, value in [self.latest[name]]]


def update_line(update: Update, *, show_all_events: bool = False) -> str | None:
    """The text of one update as the CLI streamer shows it; None for an event hidden by default."""
    data = update.data
    if update.kind == "status":
        return f"status={data.get('status') or data.get('state')}"
    if update.kind == "event":
        if not show_all_events and data.get("type") in HIDDEN_EVENTS:
            return None
        line = f"[{data.get('seq')}] {data.get('type')} ({data.get('level', 'info')}): {data.get('message', '')}"
        if data.get("type") in NUMERIC_EVENTS:
            line += _numbers_not_in(data.get("data"), str(data.get("message", "")))
        return line
    if update.kind == "metric":
        return f"{data.get('name')}={number(data.get('value'))} (step={data.get('step')})"
    if update.kind == "notice":  # the follower's own (waiting for a backend), not one of the job's events
        return f"{data.get('type')} ({data.get('level', 'info')}): {data.get('message', '')}"
    return f"timeline={data.get('phase')}"


def number(value: Any) -> str:
    """A metric value as the views print it: floats to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _numbers_not_in(data: Any, message: str, limit: int = 6) -> str:
    """`  (reward_mean=0.5, loss=0.01)`: an event's numeric fields its message does not already show."""
    if not isinstance(data, dict):
        return ""
    parts = [f"{k}={number(v)}" for k, v in data.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool) and str(k) not in message][:limit]
    return f"  ({', '.join(parts)})" if parts else ""
