"""`synth-ai train`: validate a config, then submit and follow an SFT or RL job (`--dry-run`: print the requests)."""

from __future__ import annotations

from enum import Enum

import typer

from synth_ai.cli.app import json_option, output_of


class TrainType(str, Enum):
    auto = "auto"
    rl = "rl"
    sft = "sft"


class StreamFormat(str, Enum):
    auto = "auto"
    bar = "bar"
    cli = "cli"
    chart = "chart"


STREAM_FORMAT_HELP = ("auto: a progress bar on a terminal, plain lines otherwise (CI logs); bar: the progress bar; "
                      "cli: a line per status, event and metric; chart: live charts of loss and, for RL, mean reward, "
                      "eval return, mismatch_kl and (asynchronous GSPO) staleness and backlog. --json always writes "
                      "NDJSON lines to stderr.")


def register(app: typer.Typer) -> None:
    @app.command("train")
    def train(
        ctx: typer.Context,
        config: list[str] = typer.Option(None, "--config", help="Training TOML (repeatable: pick among several)."),
        type_: TrainType = typer.Option(TrainType.auto, "--type", help="Job type; auto infers it from the config."),
        env_file: list[str] = typer.Option(None, "--env-file", help=".env file to load (repeatable; first wins)."),
        task_url: str = typer.Option(None, "--task-url", help="RL: task app URL (overrides TASK_APP_URL and "
                                     "[services].task_url)."),
        dataset: str = typer.Option(None, "--dataset", help="SFT: training JSONL (overrides [job].data)."),
        backend: str = typer.Option(None, "--backend", help="Backend base URL (default: BACKEND_BASE_URL, else the "
                                    "embedded backend: 127.0.0.1:8000, or the free port it took when 8000 was "
                                    "taken)."),
        model: str = typer.Option(None, "--model", help="Override the model (RL: becomes [model].source)."),
        allow_experimental: bool = typer.Option(None, "--allow-experimental/--no-allow-experimental",
                                                help="Allow experimental models (default: SDK_EXPERIMENTAL=1)."),
        idempotency: str = typer.Option(None, "--idempotency", help="Idempotency-Key for creating the job."),
        poll: bool = typer.Option(True, "--poll/--no-poll", help="Follow the job until it ends (--no-poll: print "
                                  "the job id and exit)."),
        poll_timeout: float = typer.Option(None, "--poll-timeout", min=0.1, help="Seconds to follow the job before "
                                           "giving up (exit 7; default: SFT [job].poll_seconds, else 3600)."),
        poll_interval: float = typer.Option(5.0, "--poll-interval", min=0.05, help="Seconds between polls, against a "
                                            "backend without a live event stream (the embedded one streams)."),
        stream_format: StreamFormat = typer.Option(StreamFormat.auto, "--stream-format", help=STREAM_FORMAT_HELP),
        examples: int = typer.Option(None, "--examples", min=1, help="SFT: upload only the first N records."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Validate and print the exact requests, send nothing."),
        json_flag: bool = json_option(),
    ) -> None:
        """Train with SFT or RL (GSPO) from a TOML config."""
        import time

        from synth_ai.cli.prompts import choose
        from synth_ai.train.prepare import TrainOptions, prepare_training

        started = time.monotonic()
        out = output_of(ctx, json_flag)
        options = TrainOptions(
            configs=list(config or []), type=type_.value, env_files=list(env_file or []), task_url=task_url,
            dataset=dataset, backend=backend, model=model, allow_experimental=allow_experimental,
            idempotency=idempotency, examples=examples, dry_run=dry_run,
        )
        prepared = prepare_training(options, choose)
        if dry_run:
            _print_dry_run(out, prepared)
            return
        _submit_and_follow(out, prepared, options, poll=poll, poll_interval=poll_interval,
                           poll_timeout=prepared.follow_timeout(poll_timeout), stream_format=stream_format.value,
                           started=started)


def _submit_and_follow(out, prepared, options, *, poll: bool, poll_interval: float, poll_timeout: float,
                       stream_format: str, started: float) -> None:
    import time

    from synth_ai.cli.follow_view import follow_and_report
    from synth_ai.connect.embedded_backend import open_api
    from synth_ai.client.follow_common import resume_command
    from synth_ai.client.idempotency import IdempotencyStore
    from synth_ai.train.capability import ensure_backend_can_train, released_on_refusal, rerun_command
    from synth_ai.train.submit import Hooks, submit

    config = prepared.config
    out.info(f"Using config: {config.source.display} ({config.kind})")
    out.issues(config.issues)
    for notice in prepared.notices:
        out.note(notice)
    api, backend = open_api(prepared.backend, say=out.info)
    # --poll-timeout bounds the whole command: every request, its retries and the following of the job.
    api.transport.set_deadline(poll_timeout - (time.monotonic() - started), f"--poll-timeout {poll_timeout:g} s")
    out.info(f"Backend: {backend.api_base} ({backend.source})")
    store = IdempotencyStore()
    rerun = rerun_command(options.configs, options.type, options.dataset, options.backend)
    hooks = Hooks(say=out.info, warn=out.warn, upload_progress=_progress_printer(out),
                  preflight=lambda: ensure_backend_can_train(api, backend, rerun))
    try:
        try:
            with released_on_refusal(backend, out.info):  # no backend started for a refused run is left behind
                submitted = submit(prepared, api, idempotency=options.idempotency, examples=options.examples,
                                   hooks=hooks, store=store)
        except KeyboardInterrupt:
            raise _interrupted_before_job(rerun) from None
        jobs = api.sft if submitted.kind == "sft" else api.rl
        if not poll:
            doc = {"job_id": submitted.job_id, "status": submitted.job.get("status", "queued"),
                   "type": submitted.kind, "backend": backend.api_base}
            out.result(doc, lambda o: o.info(f"Started job {submitted.job_id} (polling disabled); follow it with "
                                             f"`{resume_command(submitted.job_id, jobs)}`"))
            return
        follow_and_report(out, jobs, submitted.job_id, interval=poll_interval,
                          timeout=max(0.0, api.transport.time_left() or 0.0),
                          stream_format=stream_format, on_end=lambda: store.forget(*submitted.fingerprints))
    finally:
        api.close()


def _interrupted_before_job(rerun: str):
    """Ctrl-C while uploading or creating: no job to follow yet, so the way back is the same command."""
    from synth_ai.errors import ExitCode, SynthError

    err = SynthError("Interrupted before the job was started.",
                     hint=f"Run the same command again to go on: {rerun}   (uploads and the create carry "
                          "idempotency keys, so nothing is uploaded or created twice).")
    err.exit_code = ExitCode.INTERRUPTED
    err.code = "interrupted"
    return err


def _progress_printer(out):
    """Upload progress with bytes/s, on a terminal only (logs and JSON stay clean)."""
    import sys
    import time

    if out.json_mode or not sys.stdout.isatty():
        return None
    started: dict[str, float] = {}

    def show(label: str, sent: int, total: int) -> None:
        begin = started.setdefault(label, time.monotonic())
        rate = sent / max(time.monotonic() - begin, 1e-6) / 1e6
        end = "\n" if sent >= total else ""
        sys.stdout.write(f"\r  {label}: {sent / 1e6:,.1f}/{total / 1e6:,.1f} MB ({rate:,.1f} MB/s)" + end)
        sys.stdout.flush()

    return show


def _print_dry_run(out, prepared) -> None:
    config = prepared.config
    notices = list(prepared.notices)
    if prepared.missing_api_key:
        notices.append("No API key for this backend yet: run `synth-ai setup` (hosted) or `synth-ai setup --local` "
                       "(embedded), or set SYNTH_API_KEY.")
    doc = {
        "dry_run": True,
        "type": config.kind,
        "config": str(config.path),
        "model": config.model.canonical if config.model else None,
        "backend": {"api_base": prepared.backend.api_base, "source": prepared.backend.source,
                    "embedded": prepared.backend.embedded},
        "env_files": [str(p) for p in prepared.env_files],
        "requests": [r.to_dict() for r in prepared.plan.requests],
        "warnings": [i.to_dict() for i in config.warnings],
        "notes": [i.to_dict() for i in config.notes] + [{"message": n} for n in notices],
    }
    if config.kind == "rl":
        doc["task_url"] = config.task_url
    if config.kind == "sft":
        doc["dataset"] = str(config.dataset)

    def human(o) -> None:
        o.info(f"Using config: {config.source.display} ({config.kind})")
        o.info(f"Backend: {prepared.backend.api_base} ({prepared.backend.source})")
        for path in prepared.env_files:
            o.info(f"Using env file: {path}")
        o.issues(config.issues)
        for notice in notices:
            o.note(notice)
        o.info("")
        o.info("Dry run: nothing was sent. These are the requests `synth-ai train` would make:")
        for number, request in enumerate(prepared.plan.requests, start=1):
            o.info("")
            o.info(f"{number}. {request.method} {request.url}    # {request.description}")
            for name, value in request.headers.items():
                o.info(f"   {name}: {value}")
            if request.multipart is not None:
                o.info("   multipart/form-data:")
                o.json_block(request.multipart, indent=6)
            if request.json is not None:
                o.json_block(request.json, indent=3)

    out.result(doc, human)
