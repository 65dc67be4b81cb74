"""`synth-ai train`: validate a config, then submit and follow an SFT or RL job (`--dry-run`: print the requests)."""

from __future__ import annotations

from enum import Enum

import typer

from synth_ai.cli.app import output_of


class TrainType(str, Enum):
    auto = "auto"
    rl = "rl"
    sft = "sft"


class StreamFormat(str, Enum):
    cli = "cli"
    chart = "chart"


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
                                    "embedded backend on 127.0.0.1:8000)."),
        model: str = typer.Option(None, "--model", help="Override the model (RL: becomes [model].source)."),
        allow_experimental: bool = typer.Option(None, "--allow-experimental/--no-allow-experimental",
                                                help="Allow experimental models (default: SDK_EXPERIMENTAL=1)."),
        idempotency: str = typer.Option(None, "--idempotency", help="Idempotency-Key for creating the job."),
        poll: bool = typer.Option(True, "--poll/--no-poll", help="Follow the job until it ends (--no-poll: print "
                                  "the job id and exit)."),
        poll_timeout: float = typer.Option(3600.0, "--poll-timeout", help="Seconds to follow the job before "
                                           "giving up (exit 7)."),
        poll_interval: float = typer.Option(5.0, "--poll-interval", help="Seconds between polls."),
        stream_format: StreamFormat = typer.Option(StreamFormat.cli, "--stream-format",
                                                   help="cli: event lines; chart: a live loss chart."),
        examples: int = typer.Option(None, "--examples", help="SFT: upload only the first N records."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Validate and print the exact requests, send nothing."),
    ) -> None:
        """Train with SFT or RL (GSPO) from a TOML config."""
        from synth_ai.cli.prompts import choose
        from synth_ai.errors import InvalidInputError, UnavailableError
        from synth_ai.train.prepare import TrainOptions, prepare_training

        out = output_of(ctx)
        if poll_interval <= 0 or poll_timeout <= 0:
            raise InvalidInputError("--poll-interval and --poll-timeout must be greater than zero.",
                                    hint="e.g. --poll-interval 5 --poll-timeout 3600")
        options = TrainOptions(
            configs=list(config or []), type=type_.value, env_files=list(env_file or []), task_url=task_url,
            dataset=dataset, backend=backend, model=model, allow_experimental=allow_experimental,
            idempotency=idempotency, examples=examples,
        )
        prepared = prepare_training(options, choose)
        if dry_run:
            _print_dry_run(out, prepared)
            return
        raise UnavailableError(
            "Submitting training jobs is not available in this version yet: the config is valid, but nothing was sent.",
            hint="Run the same command with --dry-run to see the exact requests it will make.",
        )


def _print_dry_run(out, prepared) -> None:
    config = prepared.config
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
        "notes": [i.to_dict() for i in config.notes] + [{"message": n} for n in prepared.notices],
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
        for notice in prepared.notices:
            o.note(notice)
        o.info("")
        o.info("Dry run: nothing was sent. These are the requests `synth-ai train` would make:")
        for number, request in enumerate(prepared.plan.requests, start=1):
            o.info("")
            o.info(f"{number}. {request.method} {request.url}    # {request.step}")
            for name, value in request.headers.items():
                o.info(f"   {name}: {value}")
            if request.multipart is not None:
                o.info("   multipart/form-data:")
                o.json_block(request.multipart, indent=6)
            if request.json is not None:
                o.json_block(request.json, indent=3)

    out.result(doc, human)
