"""Atomic file writes: a reader sees the old file or the new one, never half of either."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> Path:
    """Write to a temp file in the same directory, fsync, then rename over `path`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str, *, mode: int = 0o644) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def write_secret_file(path: str | os.PathLike[str], text: str) -> Path:
    """Credentials: created 0600 (never briefly world-readable, since the temp file is 0600 from the start), in
    a folder that, when this creates it, is 0700 from the start too."""
    Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return atomic_write_text(path, text, mode=0o600)
