"""`TraceReader`: streams sessions and their messages out of a traces v3 SQLite file, read-only.

Written for databases from either implementation (ours, synth-ai 0.2.17's SessionTracer, later versions whose
`messages` table accepts more message types): it needs only `session_traces` (session_id, created_at, metadata)
and `messages`; `outcome_rewards` is read when present. Sessions come one row at a time from a cursor, and each
session's messages are fetched on demand, so memory does not grow with the database.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from synth_ai.errors import InvalidInputError, NotFoundError

REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "session_traces": ("session_id", "created_at", "metadata"),
    "messages": ("id", "session_id", "message_type", "content", "timestamp"),
}
DB_HINT = ("Point [filter].db at a trace database written by `synth-ai eval` or by a task app served with "
           "`synth-ai serve --trace-db PATH`.")


@dataclass(frozen=True, slots=True)
class SessionRow:
    session_id: str
    created_at: object  # as stored: an ISO string (ours), "YYYY-MM-DD HH:MM:SS.ffffff" (SQLAlchemy), a number
    metadata: str | None  # the JSON text, decoded by whoever needs it
    total_reward: object  # the session's first outcome_rewards row, or None
    achievements_count: object


@dataclass(frozen=True, slots=True)
class MessageRow:
    message_type: str
    content: object  # TEXT: JSON of a chat message, plain text, ...


class TraceReader:
    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            raise NotFoundError(f"Trace database not found: {path}", hint=DB_HINT)
        if path.is_dir():
            raise InvalidInputError(f"{path} is a folder, not a trace database file.", hint=DB_HINT)
        try:
            # read-only: filtering never creates, migrates or locks the database for writing
            self._conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False,
                                         timeout=30.0)  # wait out a writer's lock
            self._tables = self._check_schema()
        except sqlite3.DatabaseError as exc:
            self._close_quietly()
            raise InvalidInputError(f"{path} is not a readable SQLite trace database ({exc}).", hint=DB_HINT) from exc
        self._has_outcomes = "outcome_rewards" in self._tables

    def _check_schema(self) -> set[str]:
        tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        for table, needed in REQUIRED_COLUMNS.items():
            if table not in tables:
                raise InvalidInputError(
                    f"{self.path} is not a trace database: it has no `{table}` table "
                    f"(tables found: {', '.join(sorted(tables)) or 'none'}).", hint=DB_HINT)
            columns = {r[1] for r in self._conn.execute(f'PRAGMA table_info("{table}")')}
            missing = [c for c in needed if c not in columns]
            if missing:
                raise InvalidInputError(
                    f"{self.path} is not a traces v3 database: `{table}` lacks the column(s) {', '.join(missing)}.",
                    hint=DB_HINT)
        return tables

    def _close_quietly(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count_sessions(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM session_traces").fetchone()[0])

    def sessions(self, *, shuffle_seed: int | None = None, with_outcome: bool = True) -> Iterator[SessionRow]:
        """Every session, oldest first (ties by id), or in a seeded pseudo-random order when `shuffle_seed` is set.

        The shuffled order sorts on a keyed hash of the session id, so it depends only on the seed and the ids
        (not on insertion order) and SQLite does the sorting, not a list in memory.
        """
        if with_outcome and self._has_outcomes:
            outcome = ("(SELECT o.total_reward FROM outcome_rewards o WHERE o.session_id = s.session_id"
                       " ORDER BY o.id LIMIT 1),"
                       " (SELECT o.achievements_count FROM outcome_rewards o WHERE o.session_id = s.session_id"
                       " ORDER BY o.id LIMIT 1)")
        else:
            outcome = "NULL, NULL"
        order = "s.created_at, s.session_id"
        if shuffle_seed is not None:
            salt = f"{shuffle_seed}:".encode()

            def shuffle_key(session_id: object) -> bytes:
                return hashlib.blake2b(salt + str(session_id).encode(), digest_size=8).digest()

            self._conn.create_function("synth_shuffle_key", 1, shuffle_key, deterministic=True)
            order = "synth_shuffle_key(s.session_id), s.session_id"
        cursor = self._conn.execute(
            f"SELECT s.session_id, s.created_at, s.metadata, {outcome} FROM session_traces s ORDER BY {order}")
        try:
            while rows := cursor.fetchmany(512):
                for row in rows:
                    yield SessionRow(*row)
        finally:
            cursor.close()

    def messages(self, session_id: str) -> list[MessageRow]:
        """One session's messages in the order they were recorded (timestamp, then insertion)."""
        rows = self._conn.execute(
            "SELECT message_type, content FROM messages WHERE session_id = ? ORDER BY timestamp ASC, id ASC",
            (session_id,)).fetchall()
        return [MessageRow(str(t), c) for t, c in rows]
