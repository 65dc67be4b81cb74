"""How a followed job looks in the terminal: a progress bar with the events as lines above it (on a terminal, see
`synth_ai.cli.progress_view`), `[HH:MM:SS]` lines per status, event and metric (`--stream-format cli`, and the
default when stdout is not a terminal; RL step and eval events show their numbers), or a live chart of loss and,
for RL, mean reward, eval return and the sampler / staleness series (`chart`); then the last value of each headline metric. In `--json` mode updates
go to stderr as NDJSON so stdout keeps one document."""

from __future__ import annotations

import json
import sys
from typing import Any

from synth_ai.cli.output import Output
from synth_ai.cli.view_base import HIDDEN_EVENTS, SUMMARY_METRICS, View, number, stamp, update_line
from synth_ai.client.follow import Update
from synth_ai.env.secrets import redact

CHART_METRIC = "train.loss"
# What the chart draws: SFT's loss, and RL's loss, mean reward and eval return, then (where the job reports them)
# the sampler's agreement with the trainer and asynchronous GSPO's staleness and backlog (docs/rl.md).
CHART_SERIES = ("train.loss", "loss", "reward.mean", "eval.mean_return", "mismatch_kl", "frac_reward_zero_std",
                "staleness.mean", "backlog.groups", "is_truncated_frac", "trainer_idle_s")
_BLOCKS = "▁▂▃▄▅▆▇█"


class LineView(View):
    """One line per update, like the reference's CLI streamer."""

    def __init__(self, out: Output, *, show_all_events: bool = False) -> None:
        super().__init__()
        self.out = out
        self.show_all_events = show_all_events

    def __call__(self, update: Update) -> None:
        data = update.data
        self.remember(update)
        if self.out.json_mode:
            sys.stderr.write(redact(json.dumps({"kind": update.kind, **data}, default=str)) + "\n")
            return
        line = update_line(update, show_all_events=self.show_all_events)
        if line is not None:
            self.out.info(f"[{stamp()}] {line}")

    def close(self) -> None:
        pass


class ChartView(View):
    """A live panel with the loss curve and, for RL, the mean reward and eval return (`--stream-format chart`); other
    updates feed its status line."""

    def __init__(self, out: Output, series: tuple[str, ...] = CHART_SERIES) -> None:
        from rich.live import Live

        super().__init__()
        self.out = out
        self.series = series
        self.points: dict[str, list[tuple[int, float]]] = {name: [] for name in series}
        self.status = "pending"
        self.last_event = ""
        out.info(f"Using live loss chart (metric={CHART_METRIC}) and reward chart (metric=reward.mean)")
        self.live = Live(self._render(), console=out.out, refresh_per_second=4, transient=False)
        self.live.start()

    def __call__(self, update: Update) -> None:
        data = update.data
        self.remember(update)
        if update.kind == "status":
            self.status = str(data.get("status") or data.get("state"))
        elif update.kind == "event" and data.get("type") not in HIDDEN_EVENTS:
            self.last_event = f"{data.get('type')}: {data.get('message', '')}"
        elif (update.kind == "metric" and data.get("name") in self.points
              and isinstance(data.get("value"), (int, float))):
            self.points[str(data["name"])].append((int(data.get("step") or 0), float(data["value"])))
        self.live.update(self._render())

    def _render(self) -> Any:
        from rich.panel import Panel

        lines = []
        for name in self.series:
            points = self.points[name]
            if not points:
                continue
            step, value = points[-1]
            values = [v for _, v in points]
            lines.append(f"{name:<16} {sparkline(values[-80:])}\n{'':<16} step {step}: {number(value)}   "
                         f"min {number(min(values))}   max {number(max(values))}")
        body = "\n".join(lines) or "(waiting for the first loss or reward value)"
        body += f"\nstatus: {self.status}" + (f"   last event: {self.last_event}" if self.last_event else "")
        return Panel(redact(body), title="training", expand=False)

    def close(self) -> None:
        self.live.stop()


def sparkline(values: list[float]) -> str:
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(_BLOCKS[min(len(_BLOCKS) - 1, int((v - low) / span * (len(_BLOCKS) - 1) + 0.5))] for v in values)


def make_view(out: Output, stream_format: str, job_id: str = ""):
    """`auto`: a progress bar on a terminal, plain lines otherwise (CI logs); `--json` always gets NDJSON lines."""
    if out.json_mode or stream_format == "cli":
        return LineView(out)
    if stream_format == "chart":
        return ChartView(out)
    if stream_format == "bar" or out.out.is_terminal:
        from synth_ai.cli.progress_view import ProgressView

        return ProgressView(out, job_id)
    return LineView(out)


def follow_and_report(out: Output, jobs, job_id: str, *, interval: float, timeout: float, stream_format: str,
                      on_end=None) -> dict[str, Any]:
    """Follow a job with the chosen view, then print its final status; failure and timeout raise typed errors.

    Ctrl-C detaches (the job keeps running) and says how to resume. `on_end` runs once the job has ended.
    """
    from synth_ai.client.follow import follow_job
    from synth_ai.client.follow_common import job_flags, resume_command
    from synth_ai.errors import ExitCode, JobFailedError, SynthError

    if not out.json_mode:
        out.info("")
        out.info("=== Following job progress ===")
    view = make_view(out, stream_format, job_id)
    try:
        result = follow_job(jobs, job_id, interval=interval, timeout=timeout, on_update=view)
    except KeyboardInterrupt:
        err = SynthError(f"Detached from job {job_id}; it keeps running on the backend.",
                         hint=f"Resume with: {resume_command(job_id, jobs)}   (cancel: synth-ai jobs cancel {job_id}"
                              f"{job_flags(jobs, job_id)})",
                         details={"job_id": job_id})
        err.exit_code = ExitCode.INTERRUPTED
        err.code = "detached"
        raise err from None
    finally:  # a timeout or a lost backend must not leave a live chart running (and the cursor hidden)
        view.close()
    if on_end is not None:
        on_end()
    doc = {"job_id": job_id, "status": result.status, "fine_tuned_model": result.fine_tuned_model, "job": result.job,
           "last_metrics": {name: {"step": step, "value": value} for name, (step, value) in view.latest.items()
                            if name in SUMMARY_METRICS}}
    if not result.succeeded:
        reason = result.job.get("error") or result.job.get("failure_reason") or ""
        raise JobFailedError(f"Job {job_id} ended {result.status}{': ' + str(reason) if reason else ''}.",
                             hint=f"See its events: synth-ai jobs events {job_id}{job_flags(jobs, job_id)}", details=doc)

    def human(o: Output) -> None:
        for line in view.summary():
            o.info(line)
        o.info(f"Final status: {result.status}")
        if result.fine_tuned_model:
            o.info(f"fine_tuned_model: {result.fine_tuned_model}")

    out.result(doc, human)
    return doc
