"""Idempotency keys that outlive the process, one per logical operation.

A create (upload, job create, job start) is identified by a fingerprint of what it creates: the backend, the
operation and its content (file sha256, request body). The first attempt stores a fresh key under that
fingerprint *before* sending; a re-run after a crash, a timeout or Ctrl-C finds the same key, so the backend
returns the resource it already made instead of a second one. Once the client has seen the job end, `forget`
drops the key, so deliberately running the same training again starts a new job; so does a re-run that finds the
job it made ended `failed` or `cancelled` (keys stop duplicates of running or succeeded work only; see
`synth_ai.train.submit`). Keys also expire after a day.

Several commands may run at once (two terminals, a script starting N identical runs). Every read-change-write of
the file holds an inter-process lock (`flock` on `idempotency.lock`), so no process's entry is lost to another's
write; and a whole operation (look up what an earlier run made → send → note what was made) runs inside
`operation(fingerprint)`, a lock of its own per fingerprint, so N identical commands started together make one
resource: the first sends, the others wait and then find it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from synth_ai.env.paths import data_dir
from synth_ai.fsutil import atomic_write_text, exclusive_lock

KEY_TTL_S = 24 * 3600


def fingerprint(operation: str, api_base: str, *parts: Any) -> str:
    digest = hashlib.sha256()
    for part in (operation, api_base, *parts):
        digest.update(json.dumps(part, sort_keys=True, default=str).encode())
        digest.update(b"\0")
    return digest.hexdigest()


Entries = dict[str, dict[str, Any]]


class IdempotencyStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / "idempotency.json"
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._operation_locks = self.path.with_name(self.path.name + ".ops")

    @contextmanager
    def operation(self, fingerprint_: str) -> Iterator[None]:
        """Run one operation (look up what an earlier run made, send, `remember`) with no other process doing the
        same operation meanwhile: an identical command started at the same moment waits here, then finds what the
        first one made instead of making its own."""
        with exclusive_lock(self._operation_locks / f"{fingerprint_[:32]}.lock"):
            yield

    def _read(self) -> Entries:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        now = time.time()
        return {k: v for k, v in data.items() if isinstance(v, dict) and now - v.get("created", 0) < KEY_TTL_S}

    def _update(self, change: Callable[[Entries], bool]) -> Entries:
        """Read, apply `change` (True when it changed something) and write back, all under the file's lock."""
        with exclusive_lock(self._lock_path):
            data = self._read()
            if change(data):
                atomic_write_text(self.path, json.dumps(data, indent=1, sort_keys=True), mode=0o600)
            return data

    def key_for(self, fingerprint_: str, *, explicit: str | None = None) -> str:
        """The key to send: `explicit` (from --idempotency) wins; else the stored one, or a new stored one."""
        if explicit:
            return explicit

        def add_if_missing(data: Entries) -> bool:
            if fingerprint_ in data:
                return False
            data[fingerprint_] = {"key": f"synth-{uuid.uuid4().hex}", "created": time.time(), "pid": os.getpid()}
            return True

        return str(self._update(add_if_missing)[fingerprint_]["key"])

    def remember(self, fingerprint_: str, result_id: str) -> None:
        """Note what the operation created (e.g. the file id), so a re-run can look it up instead of redoing it."""
        def note(data: Entries) -> bool:
            entry = data.get(fingerprint_)
            if entry is None or entry.get("result") == result_id:
                return False
            entry["result"] = result_id
            return True

        self._update(note)

    def result(self, fingerprint_: str) -> str | None:
        """What an earlier run of the operation created, if it said (`remember`)."""
        value = self._read().get(fingerprint_, {}).get("result")
        return value if isinstance(value, str) else None

    def has(self, fingerprint_: str) -> bool:
        """Whether an earlier run already stored a key for this operation (so the backend may answer with what
        that run created)."""
        return fingerprint_ in self._read()

    def forget(self, *fingerprints: str) -> None:
        def drop(data: Entries) -> bool:
            found = [f for f in fingerprints if f in data]
            for f in found:
                del data[f]
            return bool(found)

        self._update(drop)
