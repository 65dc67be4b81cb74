"""`synth-ai filter --config PATH`: export traced sessions that pass the config's rules as SFT JSONL."""

from __future__ import annotations

import typer

from synth_ai.cli.app import json_option, output_of


def register(app: typer.Typer) -> None:
    @app.command("filter")
    def filter_command(
        ctx: typer.Context,
        config: str = typer.Option(None, "--config", help="Filter TOML with a [filter] table (db, output, rules; "
                                   "default: the only filter config under the working directory)."),
        json_flag: bool = json_option(),
    ) -> None:
        """Export filtered tracing sessions to SFT-ready JSONL based on a TOML config.

        Exit 0 when examples were written, 3 for an invalid config or database, 8 when the config or the
        database does not exist, 12 when no session matched (nothing is written then).
        """
        from synth_ai.config.loader import load_config
        from synth_ai.filter.flow import drop_summary, run_filter
        from synth_ai.filter.options import find_filter_config, options_from_config

        out = output_of(ctx, json_flag)
        if config is None:  # the product docs run a bare `synth-ai filter` next to its config
            config = str(find_filter_config())
            out.info(f"Using config: {config}")
        loaded = load_config(config, "filter")
        out.issues(loaded.issues)
        options = options_from_config(loaded)
        out.info(f"✓ Config validated: db={options.db}, output={options.output}")
        if options.min_official_score is not None:
            out.info(f"  → Filtering for official score >= {options.min_official_score}")
        if options.limit:
            out.info(f"  → Limiting to {options.limit} examples")
        report = run_filter(options)

        def human(o) -> None:
            o.info(drop_summary(report))
            o.info(f"Kept {report.sessions_kept} sessions ({report.examples_matched} examples"
                   + (f", {report.examples_skipped} skipped by offset" if report.examples_skipped else "")
                   + (f", {report.examples_invalid} left out as invalid SFT records" if report.examples_invalid
                      else "")
                   + (", stopped at the limit" if report.stopped_at_limit else "") + ")")
            o.info(f"Wrote {report.examples_written} examples -> {report.output}")

        out.result(report.to_dict(), human)
