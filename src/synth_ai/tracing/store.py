"""`TraceStore`: writes recorded sessions into a traces v3 SQLite file.

Plain `sqlite3` in WAL mode with a busy timeout, so readers (`eval`, `filter`, a user's `sqlite3` shell) never block
the writer; within a process one lock serialises writes, and each session is written in one transaction, so a
crash leaves the session either whole or absent.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from urllib.parse import unquote

from synth_ai.env.secrets import redact, secret_values
from synth_ai.tracing.schema import ALL_STATEMENTS
from synth_ai.tracing.session import SessionRecorder, to_json


def db_path_from_url(url: str) -> Path:
    """A SQLite path from a plain path or a SQLAlchemy-style URL: `sqlite:///rel.db` (relative),
    `sqlite+aiosqlite:////abs/x.db` (absolute)."""
    text = url.strip()
    if "://" not in text:
        return Path(text).expanduser()
    scheme, rest = text.split("://", 1)
    if not scheme.startswith("sqlite"):
        raise ValueError(f"Only SQLite trace databases are supported, not {scheme!r} ({text})")
    rest = unquote(rest.split("?", 1)[0])
    if rest.startswith("/"):  # the empty host
        rest = rest[1:]
    if not rest:
        raise ValueError(f"No database path in {text!r}")
    return Path(rest).expanduser()


class TraceStore:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser().resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30.0, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=30000")
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in ALL_STATEMENTS:
                    self._conn.execute(statement)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, session: SessionRecorder) -> None:
        """Insert the whole session (replacing an earlier write of the same session id) in one transaction."""
        session.finish()
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._delete(conn, session.session_id)
                self._insert(conn, session)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _delete(conn: sqlite3.Connection, session_id: str) -> None:
        for table in ("event_rewards", "outcome_rewards", "messages", "events", "session_timesteps",
                      "session_traces"):
            conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))

    @staticmethod
    def _insert(conn: sqlite3.Connection, s: SessionRecorder) -> None:
        secrets = secret_values()  # once per session: scrubbing re-reads the environment otherwise

        def j(value: object) -> str | None:
            return to_json(value, secrets)

        conn.execute(
            "INSERT INTO session_traces (session_id, created_at, num_timesteps, num_events, num_messages, metadata,"
            " experiment_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (s.session_id, s.created_at, len(s.timesteps), len(s.events), len(s.messages), j(s.metadata),
             s.experiment_id),
        )
        step_ids: list[int] = []
        for t in s.timesteps:
            cur = conn.execute(
                "INSERT INTO session_timesteps (session_id, step_id, step_index, turn_number, started_at,"
                " completed_at, num_events, num_messages, step_metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (s.session_id, t.step_id, t.step_index, t.turn_number, t.started_at, t.completed_at,
                 sum(1 for e in s.events if e.timestep_index == t.step_index),
                 sum(1 for m in s.messages if m.timestep_index == t.step_index), j(t.metadata)),
            )
            step_ids.append(int(cur.lastrowid))

        def step_row(index: int | None) -> int | None:
            return step_ids[index] if index is not None else None

        event_ids: list[int] = []
        for e in s.events:
            f = e.fields
            cur = conn.execute(
                "INSERT INTO events (session_id, timestep_id, event_type, system_instance_id, event_time,"
                " message_time, created_at, model_name, provider, input_tokens, output_tokens, total_tokens,"
                " cost_usd, latency_ms, span_id, trace_id, call_records, reward, terminated, truncated,"
                " system_state_before, system_state_after, metadata, event_metadata)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (s.session_id, step_row(e.timestep_index), e.event_type, f.get("system_instance_id"),
                 e.event_time, None, e.created_at, f.get("model_name"), f.get("provider"), f.get("input_tokens"),
                 f.get("output_tokens"), f.get("total_tokens"), f.get("cost_usd"), f.get("latency_ms"),
                 f.get("span_id"), f.get("trace_id"), j(f.get("call_records")), f.get("reward"),
                 f.get("terminated"), f.get("truncated"), _state(f.get("system_state_before"), secrets),
                 _state(f.get("system_state_after"), secrets), j(f.get("metadata")),
                 j(f.get("event_metadata"))),
            )
            event_ids.append(int(cur.lastrowid))
        for m in s.messages:
            content = redact(m.content, secrets) if isinstance(m.content, str) else j(m.content)
            conn.execute(
                "INSERT INTO messages (session_id, timestep_id, message_type, content, timestamp, event_time,"
                " message_time, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (s.session_id, step_row(m.timestep_index), m.message_type, content or "", m.timestamp,
                 m.event_time, None, j(m.metadata)),
            )
        for r in s.event_rewards:
            conn.execute(
                'INSERT INTO event_rewards (event_id, session_id, message_id, turn_number, reward_value,'
                ' reward_type, "key", annotation, source, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
                (event_ids[r.event.index], s.session_id, None, r.turn_number, r.reward_value, r.reward_type,
                 r.key, j(r.annotation), r.source, r.created_at),
            )
        if s.outcome is not None:
            o = s.outcome
            conn.execute(
                "INSERT INTO outcome_rewards (session_id, total_reward, achievements_count, total_steps,"
                " created_at, reward_metadata) VALUES (?, ?, ?, ?, ?, ?)",
                (s.session_id, o.total_reward, o.achievements_count, o.total_steps, o.created_at,
                 j(o.metadata)),
            )


def _state(value: object, secrets: list[str]) -> str | None:
    if value is None:
        return None
    return redact(value, secrets) if isinstance(value, str) else to_json(value, secrets)
