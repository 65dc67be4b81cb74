"""Finding config files when none is named: TOMLs under the working directory whose kind fits.

Unlike synth-ai 0.2.17, the installed package's own examples are not offered: only the user's files are.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from synth_ai.config.kinds import infer_kind

SKIPPED_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", "dist", "build", ".mypy_cache",
                ".pytest_cache", ".tox"}
MAX_FILES = 500  # stop scanning huge trees; the user can always pass --config


def discover_configs(root: Path, kinds: set[str]) -> list[tuple[Path, str]]:
    """(path, kind) of every parseable TOML under `root` of one of `kinds`, shallowest first."""
    found: list[tuple[Path, str]] = []
    seen: set[Path] = set()
    scanned = 0
    for path in sorted(_walk(root), key=lambda p: (len(p.relative_to(root).parts), str(p))):
        real = path.resolve()
        if real in seen:  # a symlinked file is the config it points at, not a second candidate
            continue
        seen.add(real)
        scanned += 1
        if scanned > MAX_FILES:
            break
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        kind = infer_kind(data)
        if kind in kinds:
            found.append((path, kind))
    return found


def _walk(root: Path):
    try:
        entries = list(root.iterdir()) if root.is_dir() else []
    except OSError:  # a folder we may not read holds no config we could use
        return
    for entry in entries:
        if entry.is_symlink() and entry.is_dir():
            continue  # a linked folder is elsewhere (or a loop back up the tree): not the user's project here
        if entry.is_dir():
            if entry.name not in SKIPPED_DIRS and not entry.name.startswith("."):
                yield from _walk(entry)
        elif entry.suffix == ".toml" and entry.name != "pyproject.toml":
            yield entry
