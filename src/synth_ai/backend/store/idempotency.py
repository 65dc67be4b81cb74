"""`Idempotency-Key` for every create: the same key and body replay the first answer; another body is a 409.

A record is `(key, scope) -> (fingerprint, status, response)`, where scope is the method and route template and
the fingerprint is a hash of what the request means (canonical JSON for JSON bodies; purpose, filename and
content sha256 for uploads). The record is written in the same transaction as the resource it created, so a
crash can never leave one without the other. Error answers are not recorded: a client may fix its request and
retry with the same key. A key whose job has since ended `failed` or `cancelled` is released (`release`): it
stops duplicates of running or succeeded work only, so the same create then makes a new job.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from synth_ai.backend.http_errors import ApiError
from synth_ai.backend.store.db import dumps, loads, utcnow

HEADER = "Idempotency-Key"
REPLAY_HEADER = "Idempotent-Replayed"
SUPERSEDED_HEADER = "Idempotency-Superseded"  # on a create that made a new job because the key's job had ended
MAX_KEY_LENGTH = 255


@dataclass
class Stored:
    status_code: int
    response: Any
    resource_id: str | None


def fingerprint_json(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def fingerprint_parts(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def check_key(key: str | None) -> str | None:
    if key is None:
        return None
    key = key.strip()
    if not key:
        return None
    if len(key) > MAX_KEY_LENGTH:
        raise ApiError(400, "invalid_idempotency_key", f"{HEADER} is longer than {MAX_KEY_LENGTH} characters.")
    return key


def lookup(conn: sqlite3.Connection, key: str, scope: str, fingerprint: str) -> Stored | None:
    """The stored answer for this key (None if new); 409 when the key was used with a different request."""
    row = conn.execute("SELECT * FROM idempotency WHERE key = ? AND scope = ?", (key, scope)).fetchone()
    if row is None:
        return None
    if row["fingerprint"] != fingerprint:
        raise ApiError(
            409, "idempotency_conflict",
            f"{HEADER} '{key}' was already used for a different request to {scope}.",
            hint="Reuse a key only to retry the identical request; use a new key for a new request.",
            details={"resource_id": row["resource_id"]})
    return Stored(row["status_code"], loads(row["response"]), row["resource_id"])


def release(conn: sqlite3.Connection, key: str, scope: str) -> None:
    """Forget a key, so the next request with it creates anew (its job ended failed or cancelled)."""
    conn.execute("DELETE FROM idempotency WHERE key = ? AND scope = ?", (key, scope))


def record(conn: sqlite3.Connection, key: str, scope: str, fingerprint: str, status_code: int, response: Any,
           resource_id: str | None) -> None:
    conn.execute("INSERT INTO idempotency (key, scope, fingerprint, status_code, response, resource_id, created_at) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (key, scope, fingerprint, status_code, dumps(response), resource_id, utcnow()))
