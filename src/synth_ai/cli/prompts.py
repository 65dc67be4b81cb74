"""Interactive choices, only ever on a terminal: without one, commands fail with the flag that avoids asking."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from synth_ai.errors import SynthError


def is_interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def choose(title: str, options: Sequence[str], *, non_interactive_error: SynthError) -> int:
    """Index of the option picked at a numbered prompt; raises `non_interactive_error` without a terminal."""
    if not is_interactive():
        raise non_interactive_error
    import typer

    typer.echo(title)
    for number, option in enumerate(options, start=1):
        typer.echo(f"  {number}) {option}")
    typer.echo("  0) Abort")
    while True:
        raw = typer.prompt("Enter choice", default="1")
        if raw.strip() == "0":
            raise typer.Abort()
        if raw.strip().isdigit() and 1 <= int(raw) <= len(options):
            return int(raw) - 1
        typer.echo(f"Invalid selection: enter a number from 0 to {len(options)}.")

