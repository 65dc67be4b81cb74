"""`synth-ai demo`: the whole loop (eval → filter → SFT → RL → eval) on this machine with the tiny model."""

from __future__ import annotations

from pathlib import Path

import typer

from synth_ai.cli.app import json_option, output_of


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        ctx: typer.Context,
        fast: bool = typer.Option(False, "--fast", help="Fewer seeds and iterations (what CI runs)."),
        keep: bool = typer.Option(False, "--keep", help="Leave the backend and task app running afterwards."),
        run_dir: Path = typer.Option(None, "--run-dir", help="Folder for configs, data, traces, charts and "
                                     "report.md (default: ./demo_runs/<time>)."),
        json_flag: bool = json_option(),
    ) -> None:
        """Run the whole loop with the tiny local Qwen3: baseline eval, filtered SFT data, SFT, RL, final eval."""
        from synth_ai.demo.flow import run_demo
        from synth_ai.demo.report import COLUMNS, table_rows

        out = output_of(ctx, json_flag)
        result = run_demo(run_dir=run_dir, fast=fast, keep=keep, say=out.info)

        def human(o) -> None:
            o.info("")
            o.table(COLUMNS, table_rows(result), title="Held-out seeds of color-quiz")
            o.info(f"Run folder: {result.run_dir} (report.md, configs/, traces, charts)")
            if result.stopped:
                o.info(f"Stopped what the demo started: {', '.join(result.stopped)}.")

        out.result(result.to_dict(), human)
