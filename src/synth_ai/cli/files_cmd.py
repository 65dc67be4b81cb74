"""`synth-ai files ...`: datasets and uploaded files.

`validate` checks a JSONL locally (no backend needed); `list` and `get` show files uploaded to a backend. Each
subcommand is one `_add_*` function taking the group, named in `SUBCOMMANDS`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from synth_ai.cli.app import json_option, output_of
from synth_ai.cli.remote import backend_option, connect, env_file_option, timeout_option


def _add_validate(group: typer.Typer) -> None:
    @group.command("validate")
    def validate(
        ctx: typer.Context,
        path: Path = typer.Argument(..., help="The SFT JSONL file to check.", show_default=False),
        model: str = typer.Option(
            None, "--model", "-m",
            help="Check images against this model: refused for text-only models, trimmed to its "
            "max_images_per_message for vision models.",
        ),
        min_messages: int = typer.Option(2, "--min-messages", min=1, help="Fewest messages (turns) per record."),
        max_errors: int = typer.Option(20, "--max-errors", min=0, help="How many problems to list (all are counted)."),
        max_image_mb: float = typer.Option(10.0, "--max-image-mb", min=0.001,
                                           help="Largest decoded size of one data-URL image, in MiB."),
        sha256: bool = typer.Option(False, "--sha256", help="Also print the file's sha256 (computed in the same "
                                    "pass; `train` always computes it for the upload)."),
        workers: int = typer.Option(0, "--workers", min=0,
                                    help="Processes for a large file: 0 = one per idle CPU, 1 = this process only."),
        json_flag: bool = json_option(),
    ) -> None:
        """Check an SFT dataset locally: every record, with line numbers, in one streaming pass.

        Exit 0 when valid, 3 when not, 8 when the file does not exist.
        """
        from synth_ai.cli.quick_validate import INVALID_INPUT, render_report, report_document
        from synth_ai.datasets import validate_jsonl

        out = output_of(ctx, json_flag)
        report = validate_jsonl(path, model=model, min_messages=min_messages, max_errors=max_errors,
                                max_image_bytes=int(max_image_mb * 2**20), sha256=sha256, workers=workers)
        out.result(report_document(report), lambda o: render_report(report, o))
        if not report.ok:
            raise typer.Exit(code=INVALID_INPUT)


def _add_list(group: typer.Typer) -> None:
    @group.command("list")
    def list_files(
        ctx: typer.Context,
        purpose: str = typer.Option(None, "--purpose", help="Only files uploaded for this purpose (fine-tune)."),
        limit: int = typer.Option(100, "--limit", min=1, max=1000, help="At most this many files."),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        timeout: float = timeout_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """List the files uploaded to the backend, newest first."""
        out = output_of(ctx, json_flag)
        api = connect(out, backend, env_file, timeout)
        with api.transport:
            doc = api.files.list(purpose=purpose, limit=limit)
        rows = doc.get("data", doc.get("files", [])) if isinstance(doc, dict) else doc

        def human(o) -> None:
            o.table(["id", "filename", "bytes", "status", "purpose", "created_at"],
                    [[f.get("id"), f.get("filename"), f.get("bytes"), f.get("status"), f.get("purpose"),
                      f.get("created_at")] for f in rows])

        out.result(doc, human)


def _add_get(group: typer.Typer) -> None:
    @group.command("get")
    def get_file(
        ctx: typer.Context,
        file_id: str = typer.Argument(..., help="File id (from the upload or `files list`)."),
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        timeout: float = timeout_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Show one uploaded file: size, sha256, status, and its line errors when invalid."""
        out = output_of(ctx, json_flag)
        api = connect(out, backend, env_file, timeout)
        with api.transport:
            doc = api.files.get(file_id)

        def human(o) -> None:
            o.table(["field", "value"], [[k, v] for k, v in doc.items() if k != "errors"])
            for error in doc.get("errors") or []:
                if isinstance(error, dict):
                    where = f"Line {error['line']}: " if error.get("line") else ""
                    o.info(f"  - {where}{error.get('message', '')}")
                else:
                    o.info(f"  - {error}")

        out.result(doc, human)


SUBCOMMANDS = (_add_validate, _add_list, _add_get)


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Datasets and uploaded files: check an SFT JSONL locally, list and inspect uploads.",
        no_args_is_help=True,
    )
    for add in SUBCOMMANDS:
        add(group)
    app.add_typer(group, name="files")
