"""`synth-ai jobs list|get|events|metrics|cancel`: look at and control training jobs on a backend."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum

import typer

from synth_ai.cli.app import json_option, output_of
from synth_ai.cli.remote import backend_option, connect, env_file_option


class JobKind(str, Enum):
    sft = "sft"
    rl = "rl"


def _kind_option() -> JobKind:
    return typer.Option(JobKind.sft, "--kind", help="Job family: sft (/learning/jobs) or rl (/rl/jobs).")


@contextmanager
def _jobs_of(out, backend: str | None, kind: JobKind, env_files: list[str] | None = None) -> Iterator:
    """The job family to talk to, on an open connection closed afterwards."""
    api = connect(out, backend, env_files)
    with api.transport:
        yield api.sft if kind is JobKind.sft else api.rl


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Training jobs: list, inspect, follow and cancel.", no_args_is_help=True)

    @group.command("list")
    def list_jobs(
        ctx: typer.Context,
        status: str = typer.Option(None, "--status", help="queued, running, succeeded, failed or cancelled."),
        type_: str = typer.Option(None, "--type", help="Job type, e.g. sft_offline."),
        limit: int = typer.Option(50, "--limit", min=1, max=1000, help="At most this many jobs."),
        kind: JobKind = _kind_option(),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """List jobs, newest first."""
        out = output_of(ctx, json_flag)
        with _jobs_of(out, backend, kind, env_file) as jobs:
            doc = jobs.list(status=status, type_=type_, limit=limit)
        rows = doc.get("jobs", doc.get("data", [])) if isinstance(doc, dict) else doc

        def human(o) -> None:
            o.table(["id", "status", "model", "fine_tuned_model", "created_at"],
                    [[j.get("id") or j.get("job_id"), j.get("status"), j.get("model"), j.get("fine_tuned_model"),
                      j.get("created_at")] for j in rows])

        out.result(doc, human)

    @group.command("get")
    def get_job(
        ctx: typer.Context,
        job_id: str = typer.Argument(..., help="Job id."),
        kind: JobKind = _kind_option(),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Show one job (status, model, fine_tuned_model, timestamps)."""
        out = output_of(ctx, json_flag)
        with _jobs_of(out, backend, kind, env_file) as jobs:
            job = jobs.get(job_id)
        out.result(job)

    @group.command("events")
    def events(
        ctx: typer.Context,
        job_id: str = typer.Argument(..., help="Job id."),
        since_seq: int = typer.Option(0, "--since-seq", min=0, help="Only events after this sequence number."),
        follow: bool = typer.Option(False, "--follow", help="Keep following until the job ends (exit code as for "
                                    "train: 0 succeeded, 6 failed/cancelled, 7 timeout)."),
        poll_interval: float = typer.Option(2.0, "--poll-interval", min=0.05, help="Seconds between polls."),
        poll_timeout: float = typer.Option(3600.0, "--poll-timeout", min=0.1, help="Give up following after this."),
        stream_format: str = typer.Option("cli", "--stream-format", help="cli or chart (with --follow)."),
        kind: JobKind = _kind_option(),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Print a job's events (and, with --follow, its metrics until it ends)."""
        from synth_ai.cli.follow_view import follow_and_report

        out = output_of(ctx, json_flag)
        if stream_format not in ("cli", "chart"):
            raise typer.BadParameter(f"{stream_format!r} is not one of 'cli', 'chart'.",
                                     param_hint="'--stream-format'")
        with _jobs_of(out, backend, kind, env_file) as jobs:
            if follow:
                jobs.t.set_deadline(poll_timeout, f"--poll-timeout {poll_timeout:g} s")  # retries included
                follow_and_report(out, jobs, job_id, interval=poll_interval, timeout=poll_timeout,
                                  stream_format=stream_format)
                return
            items = jobs.events(job_id, since_seq=since_seq, limit=1000)

        def human(o) -> None:
            for e in items:
                o.info(f"[{e.get('seq')}] {e.get('created_at', '')} {e.get('type')} ({e.get('level', 'info')}): "
                       f"{e.get('message', '')}")

        out.result({"job_id": job_id, "events": items}, human)

    @group.command("metrics")
    def metrics(
        ctx: typer.Context,
        job_id: str = typer.Argument(..., help="Job id."),
        name: str = typer.Option(None, "--name", help="Only this metric, e.g. train.loss."),
        after_step: int = typer.Option(-1, "--after-step", min=-1, help="Only points after this step."),
        kind: JobKind = _kind_option(),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Print a job's metric points (train.loss, val.loss, learning_rate, ...)."""
        from synth_ai.client.follow import next_after_step

        out = output_of(ctx, json_flag)
        with _jobs_of(out, backend, kind, env_file) as jobs:
            points: list[dict] = []
            seen: set[tuple] = set()
            while True:  # page by step: the API returns at most `limit` points per call
                page = jobs.metrics(job_id, after_step=after_step, limit=1000)
                for point in page:
                    key = (point.get("name"), point.get("step"), point.get("phase"))
                    if key not in seen:
                        seen.add(key)
                        points.append(point)
                following = next_after_step(page, after_step, 1000)
                if len(page) < 1000 or following <= after_step:
                    break
                after_step = following
        if name:
            points = [p for p in points if p.get("name") == name]

        def human(o) -> None:
            o.table(["step", "name", "value", "phase"],
                    [[p.get("step"), p.get("name"), p.get("value"), p.get("phase", "")] for p in points])

        out.result({"job_id": job_id, "points": points}, human)

    @group.command("cancel")
    def cancel(
        ctx: typer.Context,
        job_id: str = typer.Argument(..., help="Job id."),
        kind: JobKind = _kind_option(),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Cancel a queued or running job."""
        out = output_of(ctx, json_flag)
        with _jobs_of(out, backend, kind, env_file) as jobs:
            doc = jobs.cancel(job_id)
        status = doc.get("status", "cancel requested") if isinstance(doc, dict) else doc
        out.result(doc, lambda o: o.info(f"Job {job_id}: {status}"))

    app.add_typer(group, name="jobs")
