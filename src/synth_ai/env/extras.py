"""How to add an optional extra (`train`, `modal`, ...) to the environment synth-ai runs from, in uv and pip form.

The commands name where this install came from: a checkout (an editable install, or `uvx --from <dir>`) gets the
folder (`.` when it is the working directory), anything else the PyPI name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

DIST = "synth-ai"


def install_source() -> str | None:
    """The checkout folder this synth-ai was installed from, or None for an install from a package index."""
    package_root = Path(__file__).resolve().parents[3]  # <checkout>/src/synth_ai/env/extras.py
    if (package_root / "pyproject.toml").is_file() and (package_root / "src" / "synth_ai").is_dir():
        return str(package_root)
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        text = distribution(DIST).read_text("direct_url.json")
    except (PackageNotFoundError, OSError):
        return None
    try:
        doc = json.loads(text or "")
    except ValueError:
        return None
    url = doc.get("url", "") if isinstance(doc, dict) else ""
    if url.startswith("file://") and "dir_info" in doc:
        return unquote(urlparse(url).path)
    return None


def _spec(extra: str, source: str | None, cwd: Path) -> str:
    if source is None:
        return f"{DIST}[{extra}]"
    folder = Path(source)
    try:
        shown = "." if folder.resolve() == cwd.resolve() else os.path.relpath(folder, cwd)
    except ValueError:
        shown = str(folder)
    if shown.startswith("../.."):  # a path that climbs far is harder to read than the absolute one
        shown = str(folder.resolve())
    if not shown.startswith((".", "/")):
        shown = f"./{shown}"
    return f"{shown}[{extra}]"


def install_commands(extra: str, rerun: str, *, source: str | None = None, cwd: Path | None = None) -> str:
    """Lines a hint can print: run `rerun` (a `synth-ai ...` command line) again with `extra` installed."""
    spec = _spec(extra, source if source is not None else install_source(), cwd or Path.cwd())
    command = rerun.removeprefix("synth-ai").strip()
    return (f"uv:  uvx --from '{spec}' synth-ai {command}\n"
            f"pip: pip install '{spec}'   (then: synth-ai {command})")
