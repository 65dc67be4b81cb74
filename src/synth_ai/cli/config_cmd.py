"""`synth-ai config validate|schema`: check config files, and print the schema of each kind."""

from __future__ import annotations

from enum import Enum

import typer

from synth_ai.cli.app import json_option, output_of


class ConfigKind(str, Enum):
    rl = "rl"
    sft = "sft"
    eval = "eval"
    filter = "filter"


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Validate config files and show their schemas.", no_args_is_help=True)

    @group.command("validate")
    def validate(
        ctx: typer.Context,
        files: list[str] = typer.Argument(..., help="Config files (RL, SFT, eval or filter TOML)."),
        kind: ConfigKind = typer.Option(None, "--kind", help="Validate as this kind instead of inferring it."),
        task_url: str = typer.Option(None, "--task-url", help="RL: the task app URL to assume."),
        allow_experimental: bool = typer.Option(None, "--allow-experimental/--no-allow-experimental",
                                                help="Accept experimental models (default: SDK_EXPERIMENTAL=1)."),
        show_resolved: bool = typer.Option(False, "--show-resolved", help="Print the resolved config (defaults "
                                           "and model rules applied)."),
        json_flag: bool = json_option(),
    ) -> None:
        """Validate config files; report every problem with its file, line and key."""
        from synth_ai.config.validate_files import exit_code_of, validate_files

        out = output_of(ctx, json_flag)
        reports = validate_files(files, kind.value if kind else None, task_url=task_url,
                                 allow_experimental=allow_experimental)

        def human(o) -> None:
            for report in reports:
                errors = [i for i in report.issues if i.severity == "error"]
                if report.valid:
                    o.info(f"✓ {report.path} ({report.kind})")
                else:
                    o.info(f"✗ {report.path}: {report.error or f'{len(errors)} problem(s)'}")
                for issue in errors:
                    o.info(f"  - {issue.render()}")
                o.issues(report.issues)
                if show_resolved and report.resolved is not None:
                    o.json_block(report.resolved)
            bad = sum(1 for r in reports if not r.valid)
            o.info(f"{len(reports) - bad} valid, {bad} invalid")

        valid = all(r.valid for r in reports)
        out.result({"files": [r.to_dict(with_resolved=show_resolved) for r in reports], "valid": valid}, human)
        if not valid:  # the code `train` or `filter` would give the first failing file (a missing one: 8)
            raise typer.Exit(int(exit_code_of(reports)))

    @group.command("schema")
    def schema(kind: ConfigKind = typer.Argument(..., help="rl, sft, eval or filter.")) -> None:
        """Print the JSON Schema of a config kind."""
        import json

        from synth_ai.config.schema import config_schema

        typer.echo(json.dumps(config_schema(kind.value), indent=2))

    app.add_typer(group, name="config")
