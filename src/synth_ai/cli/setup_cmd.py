"""`synth-ai setup [--local]`: save SYNTH_API_KEY and ENVIRONMENT_API_KEY to ./.env and ~/.synth-ai/config.json."""

from __future__ import annotations

from pathlib import Path

import typer

from synth_ai.cli.app import json_option, output_of


def register(app: typer.Typer) -> None:
    @app.command("setup")
    def setup_cmd(
        ctx: typer.Context,
        local: bool = typer.Option(
            False, "--local",
            help="No website: create (or reuse) keys for the embedded backend and for task apps, and register them."),
        dev: bool = typer.Option(False, "--dev", help="Use the development website, http://localhost:3000."),
        origin: str | None = typer.Option(
            None, "--origin", metavar="URL",
            help="Website to run the handshake with (default https://www.usesynth.ai, or $SYNTH_SETUP_ORIGIN)."),
        env_file: Path | None = typer.Option(
            None, "--env-file", metavar="PATH", help="The .env file to write (default ./.env; created 0600)."),
        no_browser: bool = typer.Option(False, "--no-browser", help="Print the approval URL without opening it."),
        timeout: float | None = typer.Option(
            None, "--timeout", metavar="S", min=1,
            help="Seconds to wait for approval (default: until the device code expires, usually 10 min)."),
        force: bool = typer.Option(
            False, "--force", help="With --local: replace a saved SYNTH_API_KEY the embedded backend did not make."),
        json_flag: bool = json_option(),
    ) -> None:
        """Get API keys and save them to ./.env and ~/.synth-ai/config.json (0600).

        Without --local: approve access in the browser (device-code handshake with the Synth website) and save the
        keys it returns. With --local: keys for the embedded backend and task apps on this machine. Re-running
        with keys already saved changes nothing; every change is printed with the values masked.
        """
        from synth_ai.cli.prompts import is_interactive
        from synth_ai.setup.flow import SetupOptions, run_setup

        out = output_of(ctx, json_flag)
        if dev and origin:
            raise typer.BadParameter("pass either --dev or --origin URL, not both", param_hint="--dev/--origin")
        confirm = None
        if is_interactive() and not out.json_mode:
            confirm = lambda question: typer.confirm(question, default=False)  # noqa: E731
        options = SetupOptions(local=local, dev=dev, origin=origin, env_file=env_file, open_browser=not no_browser,
                               timeout=timeout, force=force)
        run_setup(options, out, confirm=confirm)
