"""Writing the output file atomically: records go to a temporary file beside the output, which replaces the
output only when complete. An interrupted or failed run leaves the previous output (if any) untouched.

Both `.jsonl` and `.json` outputs hold one JSON record per line (what synth-ai 0.2.17 writes for either name, and
what `synth-ai files validate` and `synth-ai train --dataset` read).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from synth_ai.errors import InvalidInputError


class AtomicJsonlWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        except OSError as exc:
            raise InvalidInputError(f"Cannot write the output file {path}: {exc.strerror or exc}.",
                                    hint="Choose an [filter].output in a folder you can write to.") from exc
        self._temp = Path(temp)
        self._handle = os.fdopen(fd, "w", encoding="utf-8", newline="\n")

    def write(self, record: dict[str, Any]) -> None:
        self._handle.write(json.dumps(record, ensure_ascii=False))
        self._handle.write("\n")
        self.count += 1

    def commit(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self._temp, 0o666 & ~umask)  # mkstemp creates 0600; the dataset is an ordinary file
        os.replace(self._temp, self.path)

    def discard(self) -> None:
        if not self._handle.closed:
            self._handle.close()
        self._temp.unlink(missing_ok=True)

    def __enter__(self) -> AtomicJsonlWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None or not self._handle.closed:
            self.discard()  # committed files are already in place; anything else is thrown away
