"""How to add an optional extra (`train`, `modal`, ...) to the environment synth-ai runs from, in uv and pip form.

Every install command synth-ai prints comes from here, and each names where this install came from, never the
package index: the name `synth-ai` there belongs to another project (docs/decisions.md, "Install commands"). A
checkout (an editable install, or `uvx --from <dir>`) gets the folder (`.` when it is the working directory), a
wheel the wheel's file while it still exists, a git install its URL; anything else a placeholder to fill in.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

DIST = "synth-ai"
# Where the install came from is unknown: the user fills it in (a guess at the index would install another project).
UNKNOWN_SOURCE = "<synth-ai checkout or wheel>"


def _recorded_source(doc: object) -> str | None:
    """The source a `direct_url.json` (PEP 610) records: a folder, a wheel file that still exists, or a git URL."""
    if not isinstance(doc, dict):
        return None
    url = doc.get("url", "")
    if not isinstance(url, str):
        return None
    vcs = doc.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("vcs") == "git":
        return f"git+{url}"
    if not url.startswith("file://"):
        return None
    path = unquote(urlparse(url).path)
    if "dir_info" in doc or ("archive_info" in doc and Path(path).is_file()):
        return path
    return None


@functools.lru_cache(maxsize=1)
def install_source() -> str | None:
    """The checkout folder, wheel file or git URL this synth-ai was installed from; None when none is known."""
    package_root = Path(__file__).resolve().parents[3]  # <checkout>/src/synth_ai/env/extras.py
    if (package_root / "pyproject.toml").is_file() and (package_root / "src" / "synth_ai").is_dir():
        return str(package_root)
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        text = distribution(DIST).read_text("direct_url.json")
    except (PackageNotFoundError, OSError):
        return None
    try:
        return _recorded_source(json.loads(text or ""))
    except ValueError:
        return None


def _shown_path(source: str, relative_to: Path | None) -> str:
    path = Path(source)
    if relative_to is None:
        return str(path.resolve())
    try:
        shown = "." if path.resolve() == relative_to.resolve() else os.path.relpath(path, relative_to)
    except ValueError:
        shown = str(path)
    if shown.startswith("../.."):  # a path that climbs far is harder to read than the absolute one
        shown = str(path.resolve())
    if not shown.startswith((".", "/")):
        shown = f"./{shown}"
    return shown


def requirement(extra: str, *, source: str | None = None, relative_to: Path | None = None) -> str:
    """What pip and `uvx --from` take to install this synth-ai with `extra`: `<folder or wheel>[extra]` (the path
    absolute, or relative to `relative_to`), `synth-ai[extra] @ git+…`, or the placeholder."""
    source = source if source is not None else install_source()
    if source is None:
        return f"{UNKNOWN_SOURCE}[{extra}]"
    if source.startswith("git+"):
        return f"{DIST}[{extra}] @ {source}"
    return f"{_shown_path(source, relative_to)}[{extra}]"


def pip_install(extra: str, *, source: str | None = None) -> str:
    """`pip install '<this synth-ai>[extra]'`, for a hint; the path is absolute, so the line works from any folder
    (hints made by the backend or at import time cannot know the user's)."""
    return f"pip install '{requirement(extra, source=source)}'"


def install_commands(extra: str, rerun: str, *, source: str | None = None, cwd: Path | None = None) -> str:
    """Lines a hint can print: run `rerun` (a `synth-ai ...` command line) again with `extra` installed (the path
    relative to `cwd`, the working directory by default)."""
    spec = requirement(extra, source=source, relative_to=cwd or Path.cwd())
    command = rerun.removeprefix("synth-ai").strip()
    return (f"uv:  uvx --from '{spec}' synth-ai {command}\n"
            f"pip: pip install '{spec}'   (then: synth-ai {command})")
