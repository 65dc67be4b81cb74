"""Jobs, their events, metrics and timeline in SQLite: the one place both the API and the workers write them.

Statuses: `created` (stored, not started) → `queued` (start asked, waiting for a worker slot) → `running` →
`succeeded` | `failed` | `cancelled`. A job cancelled before it runs goes straight to `cancelled`.
Event `seq` numbers are per job, start at 1 and only grow: the next one is taken inside the same write
transaction that inserts the event, so a worker and the API can both append without clashing.
"""

from __future__ import annotations

import secrets
import sqlite3
from typing import Any

from synth_ai.backend.store.db import Database, dumps, loads, utcnow

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
ACTIVE = frozenset({"queued", "running"})
STATUSES = ("created", "queued", "running", "succeeded", "failed", "cancelled")
# The wire format of a job document (reference §2.3): jobs of this kind carry the SFT fields (files,
# hyperparameters); every other kind carries its `data` table, as RL jobs do.
SFT_DOC_KIND = "sft"

# Event types per job kind (`<kind>.<what>`), written by the API, the scheduler and the workers.
EV_CREATED = "job.created"
EV_QUEUED = "job.queued"
EV_WORKER_STARTED = "job.running"
EV_PROGRESS = "progress"
EV_VALIDATION = "validation.summary"
EV_COMPLETED = "job.completed"
EV_FAILED = "job.failed"
EV_CANCELLED = "job.cancelled"
EV_CANCEL_REQUESTED = "job.cancel_requested"
EV_REQUEUED = "job.requeued"
EV_INTERRUPTED = "worker.interrupted"


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class JobStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # Reading ----------------------------------------------------------------------------------------------------
    def get(self, job_id: str, conn: sqlite3.Connection | None = None) -> sqlite3.Row | None:
        conn = conn or self.db.conn()
        return conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()

    def list(self, *, kind: str | None = None, status: str | None = None, training_type: str | None = None,
             limit: int = 50, offset: int = 0) -> list[sqlite3.Row]:
        where, args = [], []
        if kind:
            where.append("kind = ?")
            args.append(kind)
        if status:
            statuses = [s.strip().lower() for s in status.split(",") if s.strip()]
            statuses = ["cancelled" if s == "canceled" else s for s in statuses]
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            args.extend(statuses)
        if training_type:
            types = [t.strip() for t in training_type.split(",") if t.strip()]
            clauses = []
            for t in types:
                clauses.append("(training_type = ? OR kind = ?)")
                args.extend([t, t])
            where.append("(" + " OR ".join(clauses) + ")")
        sql = "SELECT * FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?"
        args.extend([limit, offset])
        return list(self.db.conn().execute(sql, args))

    def files_of(self, job_id: str) -> list[sqlite3.Row]:
        return list(self.db.conn().execute("SELECT file_id, role FROM job_files WHERE job_id = ? ORDER BY role",
                                           (job_id,)))

    def events(self, job_id: str, *, since_seq: int = 0, limit: int = 200, before_seq: int | None = None,
               newest_first: bool = False) -> list[dict[str, Any]]:
        """Events with `since_seq < seq < before_seq`: the oldest `limit` of them, or with `newest_first` the newest
        `limit`, newest first (a page of a long log's end, and pages back from it)."""
        sql = "SELECT * FROM events WHERE job_id = ? AND seq > ?"
        args: list[Any] = [job_id, since_seq]
        if before_seq is not None:
            sql += " AND seq < ?"
            args.append(before_seq)
        sql += f" ORDER BY seq {'DESC' if newest_first else 'ASC'} LIMIT ?"
        rows = self.db.conn().execute(sql, [*args, limit])
        return [
            {"seq": r["seq"], "type": r["type"], "level": r["level"], "message": r["message"],
             "data": loads(r["data"]) or {}, "created_at": r["created_at"], "job_id": r["job_id"]}
            for r in rows
        ]

    def metrics(self, job_id: str, *, after_step: int = -1, limit: int = 200,
                name: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM metrics WHERE job_id = ? AND step > ?"
        args: list[Any] = [job_id, after_step]
        if name:
            sql += " AND name = ?"
            args.append(name)
        sql += " ORDER BY step, name, phase LIMIT ?"
        args.append(limit)
        return [
            {"name": r["name"], "step": r["step"], "value": r["value"], "phase": r["phase"],
             "created_at": r["created_at"]}
            for r in self.db.conn().execute(sql, args)
        ]

    def timeline(self, job_id: str) -> list[dict[str, Any]]:
        rows = self.db.conn().execute("SELECT phase, message, created_at FROM timeline WHERE job_id = ? ORDER BY id",
                                      (job_id,))
        return [{"phase": r["phase"], "message": r["message"], "created_at": r["created_at"]} for r in rows]

    def last_event(self, job_id: str) -> dict[str, Any] | None:
        row = self.db.conn().execute("SELECT * FROM events WHERE job_id = ? ORDER BY seq DESC LIMIT 1",
                                     (job_id,)).fetchone()
        if row is None:
            return None
        return {"seq": row["seq"], "type": row["type"], "message": row["message"], "data": loads(row["data"]) or {}}

    # Writing ----------------------------------------------------------------------------------------------------
    def insert(self, conn: sqlite3.Connection, *, kind: str, training_type: str, model: str,
               payload: dict[str, Any], files: list[tuple[str, str]], prefix: str = "job") -> str:
        """Insert a new `created` job (inside the caller's transaction) with its created event."""
        job_id = new_id(prefix)
        now = utcnow()
        conn.execute(
            "INSERT INTO jobs (id, kind, training_type, status, model, payload, created_at, updated_at) "
            "VALUES (?, ?, ?, 'created', ?, ?, ?, ?)",
            (job_id, kind, training_type, model, dumps(payload), now, now))
        for file_id, role in files:
            conn.execute("INSERT OR IGNORE INTO job_files (job_id, file_id, role) VALUES (?, ?, ?)",
                         (job_id, file_id, role))
        self._timeline(conn, job_id, "created", "job created")
        self._event(conn, job_id, f"{kind}.{EV_CREATED}", f"{kind.upper()} job created for {model}",
                    {"model": model, "training_type": training_type}, "info")
        return job_id

    def add_event(self, job_id: str, type_: str, message: str, data: dict[str, Any] | None = None,
                  level: str = "info") -> int:
        with self.db.tx() as conn:
            return self._event(conn, job_id, type_, message, data, level)

    def add_metric(self, job_id: str, name: str, step: int, value: float, phase: str = "train") -> None:
        self.add_metrics(job_id, [(name, step, value, phase)])

    def add_metrics(self, job_id: str, points: list[tuple[str, int, float, str]]) -> None:
        now = utcnow()
        with self.db.tx() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO metrics (job_id, name, step, value, phase, created_at) VALUES (?,?,?,?,?,?)",
                [(job_id, name, int(step), float(value), phase or "train", now) for name, step, value, phase in points])

    def transition(self, job_id: str, status: str, *, only_from: frozenset[str] | set[str] | None = None,
                   event: tuple[str, str, dict[str, Any] | None, str] | None = None,
                   message: str | None = None, conn: sqlite3.Connection | None = None,
                   **fields: Any) -> bool:
        """Set a job's status (and fields), record it on the timeline and optionally add an event, atomically.

        With `only_from`, nothing happens unless the current status is one of those (returns False then).
        """
        def apply(c: sqlite3.Connection) -> bool:
            row = c.execute("SELECT status, kind FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or (only_from is not None and row["status"] not in only_from):
                return False
            now = utcnow()
            sets = {"status": status, "updated_at": now, **fields}
            if status == "running" and "started_at" not in fields:
                sets["started_at"] = now
            if status in TERMINAL:
                sets.setdefault("finished_at", now)
                sets.setdefault("worker_pid", None)
            cols = ", ".join(f"{k} = ?" for k in sets)
            c.execute(f"UPDATE jobs SET {cols} WHERE id = ?", [*sets.values(), job_id])
            if status != row["status"]:
                self._timeline(c, job_id, status, message)
            if event is not None:
                type_, msg, data, level = event
                self._event(c, job_id, f"{row['kind']}.{type_}", msg, data, level)
            return True

        if conn is not None:
            return apply(conn)
        with self.db.tx() as c:
            return apply(c)

    def request_cancel(self, job_id: str) -> bool:
        """Flag a running job for cancellation (the scheduler signals its worker); False if not running."""
        with self.db.tx() as conn:
            row = conn.execute("SELECT status, kind, cancel_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or row["status"] != "running":
                return False
            if not row["cancel_requested"]:
                conn.execute("UPDATE jobs SET cancel_requested = 1, updated_at = ? WHERE id = ?", (utcnow(), job_id))
                self._event(conn, job_id, f"{row['kind']}.{EV_CANCEL_REQUESTED}",
                            "Cancel requested; stopping the worker.", None, "warning")
            return True

    def update(self, job_id: str, **fields: Any) -> None:
        if not fields:
            return
        fields["updated_at"] = utcnow()
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self.db.tx() as conn:
            conn.execute(f"UPDATE jobs SET {cols} WHERE id = ?", [*fields.values(), job_id])

    @staticmethod
    def _event(conn: sqlite3.Connection, job_id: str, type_: str, message: str, data: dict[str, Any] | None,
               level: str) -> int:
        seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE job_id = ?", (job_id,)).fetchone()[0]
        conn.execute("INSERT INTO events (job_id, seq, type, level, message, data, created_at) VALUES (?,?,?,?,?,?,?)",
                     (job_id, seq, type_, level, message, dumps(data or {}), utcnow()))
        return int(seq)

    @staticmethod
    def _timeline(conn: sqlite3.Connection, job_id: str, phase: str, message: str | None) -> None:
        conn.execute("INSERT INTO timeline (job_id, phase, message, created_at) VALUES (?,?,?,?)",
                     (job_id, phase, message, utcnow()))


def job_json(row: sqlite3.Row, files: list[sqlite3.Row] | None = None) -> dict[str, Any]:
    """The job as the API shows it (`GET /learning/jobs/{id}`)."""
    payload = loads(row["payload"]) or {}
    doc: dict[str, Any] = {
        "id": row["id"],
        "job_id": row["id"],
        "object": "job",
        "job_type": row["kind"],
        "type": row["training_type"],
        "training_type": row["training_type"],
        "status": row["status"],
        "model": row["model"],
        "fine_tuned_model": row["fine_tuned_model"],
        # The hosted API links an orchestration job that streams events; here the job streams its own.
        "linked_job_id": None,
        "error": row["error"],
        "cancel_requested": bool(row["cancel_requested"]),
        "attempts": row["attempts"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "started_at": row["started_at"],
        "finished_at": row["finished_at"],
    }
    if row["kind"] == SFT_DOC_KIND:
        doc["training_file_id"] = payload.get("training_file_id")
        doc["validation_file_id"] = payload.get("validation_file_id") or _validation_file(payload)
        doc["hyperparameters"] = payload.get("hyperparameters", {})
        doc["metadata"] = payload.get("metadata", {})
    else:
        doc["data"] = payload.get("data", {})
        doc["metadata"] = payload.get("metadata", {})
    if files is not None:
        doc["files"] = [{"id": f["file_id"], "role": f["role"]} for f in files]
    return doc


def _validation_file(payload: dict[str, Any]) -> str | None:
    files = (((payload.get("metadata") or {}).get("effective_config") or {}).get("data") or {}).get("validation_files")
    if isinstance(files, list) and files:
        return str(files[0])
    return None
