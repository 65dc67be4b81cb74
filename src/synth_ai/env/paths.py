"""Where synth-ai keeps its data: `~/.synth-ai/`, or `$SYNTH_AI_HOME` when set."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir(create: bool = True) -> Path:
    """The data directory (backend DB, uploaded files, checkpoints, logs, credentials), mode 0700."""
    raw = os.environ.get("SYNTH_AI_HOME", "").strip()
    path = Path(raw).expanduser() if raw else Path.home() / ".synth-ai"
    if create and not path.is_dir():
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)  # 0700 from the start, never wider for a moment
            os.chmod(path, 0o700)  # an odd umask may have taken the owner's bits
        except OSError as exc:
            from synth_ai.errors import InvalidInputError

            setting = "SYNTH_AI_HOME" if raw else "the default data folder"
            raise InvalidInputError(f"Cannot use {path} as the data folder ({setting}): {exc.strerror or exc}.",
                                    hint="Point SYNTH_AI_HOME at a folder you may write to (it is created if "
                                         "missing).") from None
    return path


def data_path(*parts: str, create_parent: bool = True) -> Path:
    path = data_dir(create=create_parent).joinpath(*parts)
    if create_parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    return path
