"""How a followed job looks in the terminal: `[HH:MM:SS]` lines per status, event and metric (`--stream-format
cli`), or a live loss chart (`chart`). In `--json` mode updates go to stderr as NDJSON so stdout keeps one
document."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from synth_ai.cli.output import Output
from synth_ai.client.follow import Update
from synth_ai.env.secrets import redact

# Event types synth-ai 0.2.17 hid by default (noise next to the metrics that carry the same numbers).
HIDDEN_EVENTS = {
    "sft.progress", "sft.loss", "sft.upstream.status", "sft.created", "sft.pricing.check.requested",
    "sft.pricing.check.allowed", "sft.stage", "snapshot.fetch", "sft.running", "sft.status", "sft.worker.alive",
    "sft.dispatch.selected", "sft.config.prepared", "sft.strategy.selected", "sft.training.args",
}
CHART_METRIC = "train.loss"
_BLOCKS = "▁▂▃▄▅▆▇█"


def _stamp() -> str:
    return time.strftime("%H:%M:%S")


class LineView:
    """One line per update, like the reference's CLI streamer."""

    def __init__(self, out: Output, *, show_all_events: bool = False) -> None:
        self.out = out
        self.show_all_events = show_all_events

    def __call__(self, update: Update) -> None:
        data = update.data
        if self.out.json_mode:
            sys.stderr.write(redact(json.dumps({"kind": update.kind, **data}, default=str)) + "\n")
            return
        if update.kind == "status":
            line = f"status={data.get('status') or data.get('state')}"
        elif update.kind == "event":
            if not self.show_all_events and data.get("type") in HIDDEN_EVENTS:
                return
            line = f"[{data.get('seq')}] {data.get('type')} ({data.get('level', 'info')}): {data.get('message', '')}"
        elif update.kind == "metric":
            line = f"{data.get('name')}={_number(data.get('value'))} (step={data.get('step')})"
        else:
            line = f"timeline={data.get('phase')}"
        self.out.info(f"[{_stamp()}] {line}")

    def close(self) -> None:
        pass


class ChartView:
    """A live panel with the loss curve (`--stream-format chart`); other updates feed its status line."""

    def __init__(self, out: Output, metric: str = CHART_METRIC) -> None:
        from rich.live import Live

        self.out = out
        self.metric = metric
        self.points: list[tuple[int, float]] = []
        self.status = "pending"
        self.last_event = ""
        out.info(f"Using live loss chart (metric={metric})")
        self.live = Live(self._render(), console=out.out, refresh_per_second=4, transient=False)
        self.live.start()

    def __call__(self, update: Update) -> None:
        data = update.data
        if update.kind == "status":
            self.status = str(data.get("status") or data.get("state"))
        elif update.kind == "event" and data.get("type") not in HIDDEN_EVENTS:
            self.last_event = f"{data.get('type')}: {data.get('message', '')}"
        elif update.kind == "metric" and data.get("name") == self.metric and isinstance(data.get("value"), (int, float)):
            self.points.append((int(data.get("step") or 0), float(data["value"])))
        self.live.update(self._render())

    def _render(self) -> Any:
        from rich.panel import Panel

        body = sparkline([v for _, v in self.points[-80:]]) or "(waiting for the first loss value)"
        if self.points:
            step, value = self.points[-1]
            body += f"\nstep {step}: {self.metric} = {_number(value)}   min {_number(min(v for _, v in self.points))}"
        body += f"\nstatus: {self.status}" + (f"   last event: {self.last_event}" if self.last_event else "")
        return Panel(redact(body), title=f"{self.metric}", expand=False)

    def close(self) -> None:
        self.live.stop()


def sparkline(values: list[float]) -> str:
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(_BLOCKS[min(len(_BLOCKS) - 1, int((v - low) / span * (len(_BLOCKS) - 1) + 0.5))] for v in values)


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def make_view(out: Output, stream_format: str):
    if stream_format == "chart" and not out.json_mode:
        return ChartView(out)
    return LineView(out)


def follow_and_report(out: Output, jobs, job_id: str, *, interval: float, timeout: float, stream_format: str,
                      on_end=None) -> dict[str, Any]:
    """Follow a job with the chosen view, then print its final status; failure and timeout raise typed errors.

    Ctrl-C detaches (the job keeps running) and says how to resume. `on_end` runs once the job has ended.
    """
    from synth_ai.client.follow import follow_job, job_flags, resume_command
    from synth_ai.errors import ExitCode, JobFailedError, SynthError

    if not out.json_mode:
        out.info("")
        out.info("=== Following job progress ===")
    view = make_view(out, stream_format)
    try:
        result = follow_job(jobs, job_id, interval=interval, timeout=timeout, on_update=view)
    except KeyboardInterrupt:
        err = SynthError(f"Detached from job {job_id}; it keeps running on the backend.",
                         hint=f"Resume with: {resume_command(job_id, jobs)}   (cancel: synth-ai jobs cancel {job_id}"
                              f"{job_flags(jobs)})",
                         details={"job_id": job_id})
        err.exit_code = ExitCode.INTERRUPTED
        err.code = "detached"
        raise err from None
    finally:  # a timeout or a lost backend must not leave a live chart running (and the cursor hidden)
        view.close()
    if on_end is not None:
        on_end()
    doc = {"job_id": job_id, "status": result.status, "fine_tuned_model": result.fine_tuned_model, "job": result.job}
    if not result.succeeded:
        reason = result.job.get("error") or result.job.get("failure_reason") or ""
        raise JobFailedError(f"Job {job_id} ended {result.status}{': ' + str(reason) if reason else ''}.",
                             hint=f"See its events: synth-ai jobs events {job_id}{job_flags(jobs)}", details=doc)

    def human(o: Output) -> None:
        o.info(f"Final status: {result.status}")
        if result.fine_tuned_model:
            o.info(f"fine_tuned_model: {result.fine_tuned_model}")

    out.result(doc, human)
    return doc
