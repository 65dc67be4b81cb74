"""Idempotency keys that outlive the process, one per logical operation.

A create (upload, job create, job start) is identified by a fingerprint of what it creates: the backend, the
operation and its content (file sha256, request body). The first attempt stores a fresh key under that
fingerprint *before* sending; a re-run after a crash, a timeout or Ctrl-C finds the same key, so the backend
returns the resource it already made instead of a second one. Once the client has seen the job end, `forget`
drops the key, so deliberately running the same training again starts a new job; so does a re-run that finds the
job it made ended `failed` or `cancelled` (keys stop duplicates of running or succeeded work only; see
`synth_ai.train.submit`). Keys also expire after a day.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from synth_ai.env.paths import data_dir
from synth_ai.fsutil import atomic_write_text

KEY_TTL_S = 24 * 3600


def fingerprint(operation: str, api_base: str, *parts: Any) -> str:
    digest = hashlib.sha256()
    for part in (operation, api_base, *parts):
        digest.update(json.dumps(part, sort_keys=True, default=str).encode())
        digest.update(b"\0")
    return digest.hexdigest()


class IdempotencyStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / "idempotency.json"

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        now = time.time()
        return {k: v for k, v in data.items() if isinstance(v, dict) and now - v.get("created", 0) < KEY_TTL_S}

    def _write(self, data: dict[str, dict[str, Any]]) -> None:
        atomic_write_text(self.path, json.dumps(data, indent=1, sort_keys=True), mode=0o600)

    def key_for(self, fingerprint_: str, *, explicit: str | None = None) -> str:
        """The key to send: `explicit` (from --idempotency) wins; else the stored one, or a new stored one."""
        if explicit:
            return explicit
        data = self._read()
        entry = data.get(fingerprint_)
        if entry is None:
            entry = {"key": f"synth-{uuid.uuid4().hex}", "created": time.time(), "pid": os.getpid()}
            data[fingerprint_] = entry
            self._write(data)
        return str(entry["key"])

    def remember(self, fingerprint_: str, result_id: str) -> None:
        """Note what the operation created (e.g. the file id), so a re-run can look it up instead of redoing it."""
        data = self._read()
        entry = data.get(fingerprint_)
        if entry is not None and entry.get("result") != result_id:
            entry["result"] = result_id
            self._write(data)

    def result(self, fingerprint_: str) -> str | None:
        """What an earlier run of the operation created, if it said (`remember`)."""
        value = self._read().get(fingerprint_, {}).get("result")
        return value if isinstance(value, str) else None

    def has(self, fingerprint_: str) -> bool:
        """Whether an earlier run already stored a key for this operation (so the backend may answer with what
        that run created)."""
        return fingerprint_ in self._read()

    def forget(self, *fingerprints: str) -> None:
        data = self._read()
        if any(f in data for f in fingerprints):
            for f in fingerprints:
                data.pop(f, None)
            self._write(data)
