"""The one output sink: human text (rich) or exactly one JSON document on stdout.

Commands hand their result data to `Output.result`; progress lines go through `info`/`warn`/`note`. In JSON mode
stdout carries only the final document (errors included) and everything else goes to stderr, so
`synth-ai --json ... | jq` always parses. Every line is passed through `redact` first: no secret is printed.
"""

from __future__ import annotations

import sys

from synth_ai.env.secrets import redact
from synth_ai.lean_json import dumps as json_text

TYPE_CHECKING = False  # annotations only: `files validate` writes its JSON through here without `typing` loaded
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from rich.console import Console

    from synth_ai.errors import ConfigIssue, SynthError


def _width(stream) -> int | None:
    """Terminals report their width; pipes and files get a wide page so tables don't fold ids (rich's 80 would)."""
    return None if getattr(stream, "isatty", lambda: False)() else 200


class Output:
    def __init__(self, *, json_mode: bool = False) -> None:
        self.json_mode = json_mode
        self._out: Console | None = None
        self._err: Console | None = None

    # Consoles are created on first use: importing rich costs start-up time that `--help` must not pay.
    @property
    def out(self) -> Console:
        if self._out is None:
            from rich.console import Console

            self._out = Console(file=sys.stdout, highlight=False, soft_wrap=True, width=_width(sys.stdout), emoji=False)
        return self._out

    @property
    def err(self) -> Console:
        if self._err is None:
            from rich.console import Console

            self._err = Console(file=sys.stderr, highlight=False, soft_wrap=True, width=_width(sys.stderr), emoji=False)
        return self._err

    def _print(self, text: str, *, stderr: bool = False, style: str | None = None) -> None:
        console = self.err if (stderr or self.json_mode) else self.out
        console.print(redact(text), style=style, markup=False, highlight=False)

    def info(self, text: str) -> None:
        self._print(text)

    def note(self, text: str) -> None:
        self._print(f"note: {text}", style="cyan")

    def warn(self, text: str) -> None:
        self._print(f"warning: {text}", stderr=True, style="yellow")

    def issues(self, issues: list[ConfigIssue]) -> None:
        for issue in issues:
            if issue.severity == "warning":
                self.warn(issue.render())
            elif issue.severity == "note":
                self.note(issue.render())

    def result(self, data: Any, human: Callable[[Output], None] | None = None) -> None:
        """Emit the command's result: the JSON document, or the human rendering."""
        if self.json_mode:
            sys.stdout.write(redact(json_text(data)) + "\n")
            sys.stdout.flush()
        elif human is not None:
            human(self)
        else:
            import json  # ASCII-escaped for terminals; the `--json` path needs no `json` (see lean_json)

            self.out.print(redact(json.dumps(data, indent=2, default=str)), markup=False, highlight=False)

    def json_block(self, data: Any, *, indent: int = 0) -> None:
        """Pretty JSON inside human output (payload previews), optionally indented under a heading."""
        text = json_text(data)
        if indent:
            text = "\n".join(" " * indent + line for line in text.splitlines())
        self.out.print(redact(text), markup=False, highlight=False)

    def table(self, columns: list[str], rows: list[list[Any]], *, title: str | None = None) -> None:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=title, show_lines=False, header_style="bold")
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:  # cells are plain text: no markup, no `:name:` emoji (task ids like `math:train:7`)
            table.add_row(*(Text(redact("" if v is None else str(v))) for v in row))
        self.out.print(table)

    def error(self, err: SynthError) -> None:
        if self.json_mode:
            sys.stdout.write(redact(json_text({"error": err.to_dict()})) + "\n")
            sys.stdout.flush()
            return
        self.err.print(redact(f"Error: {err.message}"), style="red", markup=False, highlight=False)
        if err.hint:
            self.err.print(redact(f"Hint: {err.hint}"), markup=False, highlight=False)
