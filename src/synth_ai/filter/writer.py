"""Writing the output file atomically: records go to a temporary file beside the output, which replaces the
output only when complete. An interrupted or failed run leaves the previous output (if any) untouched.

Both `.jsonl` and `.json` outputs hold one JSON record per line (what synth-ai 0.2.17 writes for either name, and
what `synth-ai files validate` and `synth-ai train --dataset` read).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any

from synth_ai.errors import InvalidInputError
from synth_ai.fsutil import AtomicFile


class AtomicJsonlWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        umask = os.umask(0)
        os.umask(umask)
        try:  # the dataset is an ordinary file: the mode a plain open() would give it
            self._file = AtomicFile(path, mode=0o666 & ~umask)
        except OSError as exc:
            raise InvalidInputError(f"Cannot write the output file {path}: {exc.strerror or exc}.",
                                    hint="Choose an [filter].output in a folder you can write to.") from exc

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
        self.count += 1

    def commit(self) -> None:
        self._file.commit()

    def discard(self) -> None:
        self._file.discard()

    def __enter__(self) -> AtomicJsonlWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._file.__exit__(exc_type, exc, tb)  # committed files are in place; anything else is thrown away
