"""`synth-ai jobs list|get|events|follow|metrics|cancel|log`: look at and control training jobs on a backend.

A job id says its family (`job_…` SFT, `rljob_…` RL), so the commands on one job need no `--kind`; an id of another
shape is looked up under `/learning/jobs`, then `/rl/jobs` (`SynthAPI.families_for`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

import typer

from synth_ai.cli.app import json_option, output_of
from synth_ai.cli.remote import backend_option, connect, env_file_option, timeout_option
from synth_ai.cli.train import STREAM_FORMAT_HELP, StreamFormat


class JobFamily(str, Enum):
    """`--kind`: which route family a job is read through (the backend's registry of job kinds is `JobKind`)."""

    sft = "sft"
    rl = "rl"


def _kind_option() -> JobFamily | None:
    return typer.Option(None, "--kind", help="Job family: sft (/learning/jobs) or rl (/rl/jobs). Default: the one "
                        "the id names (job_… sft, rljob_… rl); for an id of another shape, /learning/jobs, then "
                        "/rl/jobs.")


def _kind_name(kind: JobFamily | None) -> str | None:
    return kind.value if kind is not None else None


def _first_that_knows(families: tuple, call: Callable) -> tuple:
    from synth_ai.client.resources import first_that_knows  # here: `--help` imports no HTTP client

    return first_that_knows(families, call)


def _check_can_plot(path: Path) -> None:
    """Before any request: Pillow is there and the file can be written."""
    from synth_ai.charts import pillow_available
    from synth_ai.env.extras import pip_install
    from synth_ai.errors import InvalidInputError, UnavailableError

    if not pillow_available():
        raise UnavailableError("--plot draws with Pillow, which is not installed.",
                               hint=f"{pip_install('train')} (or just pillow), then run the command again.")
    if path.suffix.lower() != ".png":
        raise InvalidInputError(f"--plot {path}: the chart is a PNG; name the file *.png.", hint="e.g. --plot loss.png")
    if path.is_dir():
        raise InvalidInputError(f"--plot {path} is a directory; give a file name.", hint=f"e.g. --plot {path}/loss.png")


def _plot(job_id: str, points: list, path: Path, jobs) -> str:
    from synth_ai.charts import JOB_PANELS, job_metrics_chart
    from synth_ai.client.follow_common import job_flags
    from synth_ai.errors import NotFoundError

    if job_metrics_chart(points, path) is None:
        drawn = ", ".join(name for _, names in JOB_PANELS for name in names)
        raise NotFoundError(f"Job {job_id} has no metric points to plot ({drawn})"
                            f"{'; it has ' + str(len(points)) + ' other points' if points else ''}.",
                            hint=f"Metrics appear once training steps run: synth-ai jobs get {job_id}"
                                 f"{job_flags(jobs, job_id)} shows its status.", details={"job_id": job_id})
    return str(path)


def _poll_interval_option() -> float:
    return typer.Option(2.0, "--poll-interval", min=0.05, help="Seconds between polls, against a backend without a "
                        "live event stream (the embedded one streams).")


def _poll_timeout_option() -> float:
    return typer.Option(3600.0, "--poll-timeout", min=0.1, help="Give up following after this many seconds.")


def _stream_format_option(when: str = "") -> StreamFormat:
    return typer.Option(StreamFormat.auto, "--stream-format", help=when + STREAM_FORMAT_HELP)


@contextmanager
def _api_of(out, backend: str | None, env_files: list[str] | None = None, timeout: float | None = None) -> Iterator:
    """The API on an open connection closed afterwards; `timeout` bounds the whole command."""
    api = connect(out, backend, env_files, timeout)
    with api.transport:
        yield api


def _follow(out, jobs, job_id: str, poll_interval: float, poll_timeout: float, stream_format: StreamFormat) -> None:
    """`jobs follow` and `jobs events --follow`: --poll-timeout bounds every call, retries included, as for train
    (or an earlier --timeout deadline, when one is set)."""
    from synth_ai.cli.follow_view import follow_and_report

    left = jobs.t.time_left()
    if left is None or poll_timeout < left:
        jobs.t.set_deadline(poll_timeout, f"--poll-timeout {poll_timeout:g} s")
        left = poll_timeout
    follow_and_report(out, jobs, job_id, interval=poll_interval, timeout=max(0.0, left),
                      stream_format=stream_format.value)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Training jobs: list, inspect, follow, cancel, and log to experiment trackers.", no_args_is_help=True)

    @group.command("list")
    def list_jobs(
        ctx: typer.Context,
        status: str = typer.Option(None, "--status", help="queued, running, succeeded, failed or cancelled."),
        type_: str = typer.Option(None, "--type", help="Job type, e.g. sft_offline."),
        limit: int = typer.Option(50, "--limit", min=1, max=1000, help="At most this many jobs."),
        kind: JobFamily = typer.Option(JobFamily.sft, "--kind", help="Job family: sft (/learning/jobs, every job on "
                                     "the embedded backend) or rl (/rl/jobs, RL jobs only)."),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        timeout: float = timeout_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """List jobs, newest first."""
        out = output_of(ctx, json_flag)
        with _api_of(out, backend, env_file, timeout) as api:
            doc = (api.rl if kind is JobFamily.rl else api.sft).list(status=status, type_=type_, limit=limit)
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
        kind: JobFamily | None = _kind_option(),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        timeout: float = timeout_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Show one job (status, model, fine_tuned_model, timestamps)."""
        out = output_of(ctx, json_flag)
        with _api_of(out, backend, env_file, timeout) as api:
            _, job = _first_that_knows(api.families_for(job_id, _kind_name(kind)), lambda jobs: jobs.get(job_id))
        out.result(job)

    @group.command("events")
    def events(
        ctx: typer.Context,
        job_id: str = typer.Argument(..., help="Job id."),
        since_seq: int = typer.Option(0, "--since-seq", min=0, help="Only events after this sequence number."),
        follow: bool = typer.Option(False, "--follow", help="Keep following until the job ends (exit code as for "
                                    "train: 0 succeeded, 6 failed/cancelled, 7 timeout)."),
        poll_interval: float = _poll_interval_option(),
        poll_timeout: float = _poll_timeout_option(),
        stream_format: StreamFormat = _stream_format_option("With --follow: "),
        kind: JobFamily | None = _kind_option(),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        timeout: float = timeout_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Print a job's events (and, with --follow, its metrics until it ends)."""
        out = output_of(ctx, json_flag)
        with _api_of(out, backend, env_file, timeout) as api:
            if follow:
                _follow(out, api.family_of(job_id, _kind_name(kind)), job_id, poll_interval, poll_timeout,
                        stream_format)
                return
            _, items = _first_that_knows(api.families_for(job_id, _kind_name(kind)),
                                         lambda jobs: jobs.events(job_id, since_seq=since_seq, limit=1000))

        def human(o) -> None:
            for e in items:
                o.info(f"[{e.get('seq')}] {e.get('created_at', '')} {e.get('type')} ({e.get('level', 'info')}): "
                       f"{e.get('message', '')}")

        out.result({"job_id": job_id, "events": items}, human)

    @group.command("follow")
    def follow_cmd(
        ctx: typer.Context,
        job_id: str = typer.Argument(..., help="Job id."),
        poll_interval: float = _poll_interval_option(),
        poll_timeout: float = _poll_timeout_option(),
        stream_format: StreamFormat = _stream_format_option(),
        kind: JobFamily | None = _kind_option(),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Follow a job until it ends (same as `jobs events JOB --follow`; exit 0 succeeded, 6 failed/cancelled,
        7 timeout)."""
        out = output_of(ctx, json_flag)
        with _api_of(out, backend, env_file) as api:
            _follow(out, api.family_of(job_id, _kind_name(kind)), job_id, poll_interval, poll_timeout, stream_format)

    @group.command("metrics")
    def metrics(
        ctx: typer.Context,
        job_id: str = typer.Argument(..., help="Job id."),
        name: str = typer.Option(None, "--name", help="Only this metric, e.g. train.loss."),
        after_step: int = typer.Option(-1, "--after-step", min=-1, help="Only points after this step."),
        plot: Path = typer.Option(None, "--plot", help="Also draw the loss, learning rate, reward and eval curves "
                                  "to this PNG file (needs Pillow: the train extra)."),
        kind: JobFamily | None = _kind_option(),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        timeout: float = timeout_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Print a job's metric points (train.loss, val.loss, learning_rate, ...), or plot them with --plot."""
        out = output_of(ctx, json_flag)
        if plot is not None:
            _check_can_plot(plot)
        with _api_of(out, backend, env_file, timeout) as api:
            jobs, points = _first_that_knows(api.families_for(job_id, _kind_name(kind)),
                                             lambda family: family.all_metrics(job_id, after_step=after_step))
        if name:
            points = [p for p in points if p.get("name") == name]
        doc: dict = {"job_id": job_id, "points": points}
        if plot is not None:
            doc["plot"] = _plot(job_id, points, plot, jobs)
            out.result(doc, lambda o: o.info(f"Wrote {doc['plot']} ({len(points)} points of job {job_id})."))
            return

        def human(o) -> None:
            o.table(["step", "name", "value", "phase"],
                    [[p.get("step"), p.get("name"), p.get("value"), p.get("phase", "")] for p in points])

        out.result(doc, human)

    @group.command("cancel")
    def cancel(
        ctx: typer.Context,
        job_id: str = typer.Argument(..., help="Job id."),
        kind: JobFamily | None = _kind_option(),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        timeout: float = timeout_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Cancel a queued or running job."""
        out = output_of(ctx, json_flag)
        with _api_of(out, backend, env_file, timeout) as api:
            _, doc = _first_that_knows(api.families_for(job_id, _kind_name(kind)), lambda jobs: jobs.cancel(job_id))
        status = doc.get("status", "cancel requested") if isinstance(doc, dict) else doc
        out.result(doc, lambda o: o.info(f"Job {job_id}: {status}"))

    from synth_ai.cli.jobs_log_cmd import register_log

    register_log(group, JobFamily, _kind_option, _kind_name, _api_of, _first_that_knows)
    app.add_typer(group, name="jobs")
