"""The click exceptions that Typer actually raises.

Typer 0.29 vendors its own partial copy of click (`typer._click`); older releases use the `click` package.
Exceptions must come from the copy in use, or `except` clauses silently miss (a usage error would be reported as
an internal error). This is the one place that knows; everything else uses Typer's public names.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import typer
import typer.core


def _click_exceptions() -> ModuleType:
    vendored = getattr(typer.core, "_click", None)
    name = vendored.__name__ if isinstance(vendored, ModuleType) else "click"
    return importlib.import_module(f"{name}.exceptions")


_exceptions = _click_exceptions()
UsageError = _exceptions.UsageError
ClickException = _exceptions.ClickException
Exit = typer.Exit
Abort = typer.Abort
