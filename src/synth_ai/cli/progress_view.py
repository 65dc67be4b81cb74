"""A followed job as a rich progress bar: step (SFT) or iteration (RL) of the total, epoch, ETA, tokens/s, the last
loss and, for RL, the mean reward. Status changes and events print as lines above the bar; metric points only move
it. Used on a terminal (`--stream-format auto`, the default, or `bar`); logs get plain lines instead."""

from __future__ import annotations

from typing import Any

from synth_ai.cli.output import Output
from synth_ai.cli.view_base import View, number, stamp, update_line
from synth_ai.client.follow import Update
from synth_ai.env.secrets import redact

# Which metric moves the bar (its step is 0-based: step s done means s + 1 of the total) and which fill the stats.
PROGRESS_METRICS = {"train.loss": "step", "reward.mean": "iteration"}
LOSS_METRICS = ("train.loss", "loss")
# Where the total comes from: SFT's progress events and RL's start event.
TOTAL_FIELDS = ("total_steps", "iterations")


class ProgressView(View):
    def __init__(self, out: Output, job_id: str = "") -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        super().__init__()
        self.out = out
        self.job_id = job_id
        self.unit = "step"
        self.total: int | None = None
        self.done = 0
        self.stats: dict[str, Any] = {}
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("eta"),
            TimeRemainingColumn(), TextColumn("{task.fields[stats]}"),
            console=out.out, refresh_per_second=4, transient=False)
        self.task = self.progress.add_task(self._description(), total=None, stats="waiting for the first step")
        self.progress.start()

    def __call__(self, update: Update) -> None:
        self.remember(update)
        data = update.data
        if update.kind == "metric":
            self._metric(data)
        else:
            if update.kind == "event":
                self._event_numbers(data.get("data"))
            line = update_line(update)
            if line is not None:
                self.progress.console.print(redact(f"[{stamp()}] {line}"), markup=False, highlight=False)
        self.progress.update(self.task, total=self.total, completed=self.done, description=self._description(),
                             stats=redact(self._stats_text()))

    def _metric(self, point: dict[str, Any]) -> None:
        name, step, value = str(point.get("name")), point.get("step"), point.get("value")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return
        if name in PROGRESS_METRICS and isinstance(step, int):
            self.unit = PROGRESS_METRICS[name]
            self.done = max(self.done, step + 1)
        if name in LOSS_METRICS:
            self.stats["loss"] = value
        elif name == "tokens_per_second":
            self.stats["tok/s"] = value
        elif name == "reward.mean":
            self.stats["reward"] = value
        elif name == "eval.mean_return":
            self.stats["eval"] = value

    def _event_numbers(self, data: Any) -> None:
        if not isinstance(data, dict):
            return
        for field in TOTAL_FIELDS:
            if isinstance(data.get(field), int) and data[field] > 0:
                self.total = data[field]
        if isinstance(data.get("epoch"), (int, float)):
            self.stats["epoch"] = data["epoch"]
        if isinstance(data.get("step"), int) and isinstance(data.get("total_steps"), int):
            self.done = max(self.done, data["step"])  # SFT's progress event counts steps done

    def _description(self) -> str:
        return f"{self.job_id} {self.unit}".strip()

    def _stats_text(self) -> str:
        parts = []
        if "epoch" in self.stats:
            parts.append(f"epoch {number(float(self.stats['epoch']))}")
        if "tok/s" in self.stats:
            parts.append(f"{self.stats['tok/s']:,.0f} tok/s")
        for key in ("loss", "reward", "eval"):
            if key in self.stats:
                parts.append(f"{key} {number(float(self.stats[key]))}")
        return "  ".join(parts)

    def close(self) -> None:
        self.progress.stop()
