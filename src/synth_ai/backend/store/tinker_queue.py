"""The Tinker API's shared state in the backend's SQLite file: sessions, training models, samplers, and the
requests (futures) that pass from the API process to the job worker that holds a model.

The API process never runs a model: a Tinker call is stored here as a pending request and answered with its id
(the SDK's future). The `tinker` job's worker takes its model's requests in the SDK's `seq_id` order (samples, which
have no order, whenever they come), stores each result or error, and `retrieve_future` reads it back. A request sent
again with a `seq_id` already stored (the SDK retries a submit after a timeout) is the stored one, not a second one.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from synth_ai.backend.store.db import Database, dumps, loads, utcnow
from synth_ai.backend.store.job_records import new_id

PENDING, DONE, FAILED = "pending", "done", "failed"
_SAMPLE = ":sample:"


def sampler_id_of(session_id: str, seq_id: int) -> str:
    """The id of a session's `seq_id`-th sampling client, in the SDK's own form."""
    return f"{session_id}{_SAMPLE}{int(seq_id)}"


@dataclass(frozen=True)
class Request:
    id: str
    model_id: str
    seq_id: int | None
    op: str
    body: dict[str, Any]
    status: str
    result: Any
    error: str | None
    category: str | None

    @classmethod
    def of(cls, row: sqlite3.Row) -> Request:
        return cls(row["id"], row["model_id"], row["seq_id"], row["op"], loads(row["body"]) or {}, row["status"],
                   loads(row["result"]), row["error"], row["category"])


class TinkerQueue:
    def __init__(self, db: Database) -> None:
        self.db = db

    # Sessions ---------------------------------------------------------------------------------------------------
    def new_session(self) -> str:
        session_id = new_id("sess")
        now = utcnow()
        with self.db.tx() as conn:
            conn.execute("INSERT INTO tinker_sessions (id, created_at, heartbeat_at) VALUES (?, ?, ?)",
                         (session_id, now, now))
        return session_id

    def session(self, session_id: str) -> sqlite3.Row | None:
        return self.db.conn().execute("SELECT * FROM tinker_sessions WHERE id = ?", (session_id,)).fetchone()

    def heartbeat(self, session_id: str) -> bool:
        """False for a session that is unknown or finished (the SDK stops its heartbeats on a 410)."""
        with self.db.tx() as conn:
            done = conn.execute("UPDATE tinker_sessions SET heartbeat_at = ? WHERE id = ? AND finished_at IS NULL",
                                (utcnow(), session_id))
        return done.rowcount == 1

    def finish_session(self, session_id: str) -> bool:
        with self.db.tx() as conn:
            done = conn.execute("UPDATE tinker_sessions SET finished_at = ? WHERE id = ? AND finished_at IS NULL",
                                (utcnow(), session_id))
        return done.rowcount == 1

    def sessions(self, *, limit: int, offset: int) -> list[str]:
        """Session ids, newest first."""
        rows = self.db.conn().execute("SELECT id FROM tinker_sessions ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
                                      (limit, offset)).fetchall()
        return [row["id"] for row in rows]

    def session_silent_for(self, session_id: str) -> float | None:
        """Seconds since the session's last heartbeat; None once it is finished (or unknown)."""
        row = self.session(session_id)
        if row is None or row["finished_at"]:
            return None
        last = datetime.fromisoformat(row["heartbeat_at"].replace("Z", "+00:00"))
        return (datetime.now(timezone.utc) - last).total_seconds()

    # Models and samplers ----------------------------------------------------------------------------------------
    def add_model(self, conn: sqlite3.Connection, *, model_id: str, session_id: str, job_id: str, base_model: str,
                  lora_rank: int) -> None:
        conn.execute("INSERT INTO tinker_models (id, session_id, job_id, base_model, lora_rank, created_at) "
                     "VALUES (?, ?, ?, ?, ?, ?)", (model_id, session_id, job_id, base_model, lora_rank, utcnow()))

    def model(self, model_id: str) -> sqlite3.Row | None:
        return self.db.conn().execute("SELECT * FROM tinker_models WHERE id = ?", (model_id,)).fetchone()

    def models(self, *, limit: int = -1, offset: int = 0) -> tuple[list[sqlite3.Row], int]:
        """A page of the training models, newest first (limit -1: all of them), and how many there are."""
        conn = self.db.conn()
        rows = conn.execute("SELECT * FROM tinker_models ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
                            (limit, offset)).fetchall()
        return rows, int(conn.execute("SELECT COUNT(*) FROM tinker_models").fetchone()[0])

    def session_models(self, session_id: str) -> list[str]:
        rows = self.db.conn().execute("SELECT id FROM tinker_models WHERE session_id = ? ORDER BY created_at, id",
                                      (session_id,)).fetchall()
        return [row["id"] for row in rows]

    def last_request_at(self, model_id: str) -> str | None:
        """When the model's latest request came (a sample counts: it is a request to the model's worker)."""
        row = self.db.conn().execute("SELECT MAX(created_at) FROM tinker_requests WHERE model_id = ?",
                                     (model_id,)).fetchone()
        return row[0]

    def add_sampler(self, sampler_id: str, model_id: str, weights: str | None) -> None:
        with self.db.tx() as conn:
            conn.execute("INSERT OR REPLACE INTO tinker_samplers (id, model_id, weights, created_at) "
                         "VALUES (?, ?, ?, ?)", (sampler_id, model_id, weights, utcnow()))

    def sampler(self, sampler_id: str) -> sqlite3.Row | None:
        return self.db.conn().execute("SELECT * FROM tinker_samplers WHERE id = ?", (sampler_id,)).fetchone()

    def session_samplers(self, session_id: str) -> list[str]:
        """The samplers a session created (their ids start with the session's: `sampler_id_of`)."""
        prefix = f"{session_id}{_SAMPLE}"
        rows = self.db.conn().execute("SELECT id FROM tinker_samplers WHERE substr(id, 1, ?) = ? "
                                      "ORDER BY created_at, id", (len(prefix), prefix)).fetchall()
        return [row["id"] for row in rows]

    # Requests ---------------------------------------------------------------------------------------------------
    def submit(self, model_id: str, seq_id: int | None, op: str, body: dict[str, Any],
               conn: sqlite3.Connection | None = None) -> str:
        """The id of the pending request; the stored one when this model's `seq_id` was submitted before."""
        def apply(c: sqlite3.Connection) -> str:
            if seq_id is not None:
                known = c.execute("SELECT id FROM tinker_requests WHERE model_id = ? AND seq_id = ?",
                                  (model_id, seq_id)).fetchone()
                if known is not None:
                    return known["id"]
            request_id = new_id("req")
            c.execute("INSERT INTO tinker_requests (id, model_id, seq_id, op, body, status, created_at) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)", (request_id, model_id, seq_id, op, dumps(body), PENDING, utcnow()))
            return request_id

        if conn is not None:
            return apply(conn)
        with self.db.tx() as c:
            return apply(c)

    def get(self, request_id: str) -> Request | None:
        row = self.db.conn().execute("SELECT * FROM tinker_requests WHERE id = ?", (request_id,)).fetchone()
        return Request.of(row) if row is not None else None

    def next_for(self, model_id: str, next_seq: int) -> Request | None:
        """The model's next training call to run: its lowest pending `seq_id` from `next_seq` on. Numbers can be
        missing: a call refused at submit (a 400) used its number without storing a request. Nothing is taken out
        of order by this: the SDK submits a client's request n+1 only once request n's submit has been answered
        (chunks of one forward_backward too: client/config turns their parallel sending off)."""
        row = self.db.conn().execute(
            "SELECT * FROM tinker_requests WHERE model_id = ? AND status = ? AND seq_id >= ? ORDER BY seq_id LIMIT 1",
            (model_id, PENDING, next_seq)).fetchone()
        return Request.of(row) if row is not None else None

    def pending_samples(self, model_id: str) -> list[Request]:
        """The model's sample calls not answered yet (they carry no `seq_id`), oldest first."""
        rows = self.db.conn().execute(
            "SELECT * FROM tinker_requests WHERE model_id = ? AND status = ? AND seq_id IS NULL ORDER BY created_at",
            (model_id, PENDING)).fetchall()
        return [Request.of(row) for row in rows]

    def finish(self, request_id: str, result: Any) -> None:
        with self.db.tx() as conn:
            conn.execute("UPDATE tinker_requests SET status = ?, result = ?, finished_at = ? WHERE id = ?",
                         (DONE, dumps(result), utcnow(), request_id))

    def fail(self, request_id: str, message: str, category: str = "user") -> None:
        with self.db.tx() as conn:
            conn.execute("UPDATE tinker_requests SET status = ?, error = ?, category = ?, finished_at = ? "
                         "WHERE id = ?", (FAILED, message, category, utcnow(), request_id))

    def fail_pending(self, model_id: str, message: str) -> int:
        """Fail what a model's worker left unanswered (it stopped or died): no future waits forever."""
        with self.db.tx() as conn:
            done = conn.execute("UPDATE tinker_requests SET status = ?, error = ?, category = 'server', "
                                "finished_at = ? WHERE model_id = ? AND status = ?",
                                (FAILED, message, utcnow(), model_id, PENDING))
        return done.rowcount
