"""SQLite for the embedded backend: one file, WAL, a busy timeout, and forward-only named migrations.

The API process and every job worker open the same database. WAL lets readers run while a worker writes;
`busy_timeout` makes a writer wait for the lock instead of failing; writes that must be atomic across statements
(the next event `seq`, an idempotency record with the resource it created) run in `BEGIN IMMEDIATE`.

Migrations are applied in list order and recorded by name in `schema_migrations`; a released migration is never
edited or removed, only followed by a new one.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from synth_ai.timestamps import utcnow  # noqa: F401  (re-exported: the backend imports it from here)

BUSY_TIMEOUT_MS = 30_000
MAX_INTEGER = 2**63 - 1  # SQLite's largest INTEGER: query parameters above it are refused with a 422

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_files",
        """
        CREATE TABLE files (
            id TEXT PRIMARY KEY,
            filename TEXT NOT NULL,
            purpose TEXT NOT NULL,
            bytes INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            content_type TEXT,
            status TEXT NOT NULL,
            errors TEXT,
            error_count INTEGER NOT NULL DEFAULT 0,
            summary TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX files_sha256 ON files(sha256);
        CREATE INDEX files_created ON files(created_at);
        """,
    ),
    (
        "0002_jobs_events_metrics",
        """
        CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,                -- sft | rl
            training_type TEXT NOT NULL,       -- sft_offline | rl_online | ...
            status TEXT NOT NULL,
            model TEXT NOT NULL,
            payload TEXT NOT NULL,             -- the create body as received
            fine_tuned_model TEXT,
            error TEXT,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            worker_pid INTEGER,
            attempts INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            started_at TEXT,
            finished_at TEXT
        );
        CREATE INDEX jobs_status ON jobs(status);
        CREATE INDEX jobs_created ON jobs(created_at);
        CREATE TABLE job_files (
            job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
            file_id TEXT NOT NULL,
            role TEXT NOT NULL,                -- training | validation
            PRIMARY KEY (job_id, file_id, role)
        );
        CREATE INDEX job_files_file ON job_files(file_id);
        CREATE TABLE events (
            job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            type TEXT NOT NULL,
            level TEXT NOT NULL,
            message TEXT NOT NULL,
            data TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY (job_id, seq)
        );
        CREATE TABLE metrics (
            job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            step INTEGER NOT NULL,
            value REAL NOT NULL,
            phase TEXT NOT NULL DEFAULT 'train',
            created_at TEXT NOT NULL,
            PRIMARY KEY (job_id, name, step, phase)
        );
        CREATE INDEX metrics_step ON metrics(job_id, step);
        CREATE TABLE timeline (
            job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            phase TEXT NOT NULL,
            message TEXT,
            created_at TEXT NOT NULL
        );
        CREATE INDEX timeline_job ON timeline(job_id, id);
        """,
    ),
    (
        "0003_idempotency",
        """
        CREATE TABLE idempotency (
            key TEXT NOT NULL,
            scope TEXT NOT NULL,               -- "POST /api/learning/jobs"
            fingerprint TEXT NOT NULL,         -- sha256 of the request body (or of what it means, for uploads)
            status_code INTEGER NOT NULL,
            response TEXT NOT NULL,
            resource_id TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY (key, scope)
        );
        """,
    ),
    (
        "0004_tinker",
        """
        CREATE TABLE tinker_sessions (
            id TEXT PRIMARY KEY,
            created_at TEXT NOT NULL,
            heartbeat_at TEXT NOT NULL,
            finished_at TEXT
        );
        CREATE TABLE tinker_models (
            id TEXT PRIMARY KEY,               -- "<session id>:train:<model seq id>", the SDK's own form
            session_id TEXT NOT NULL,
            job_id TEXT NOT NULL,
            base_model TEXT NOT NULL,
            lora_rank INTEGER NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE TABLE tinker_requests (
            id TEXT PRIMARY KEY,
            model_id TEXT NOT NULL,            -- the training model that runs it (a sample: its sampler's model)
            seq_id INTEGER,                    -- the model's order; NULL for samples, which have none
            op TEXT NOT NULL,
            body TEXT NOT NULL,
            status TEXT NOT NULL,              -- pending, done, failed
            result TEXT,
            error TEXT,
            category TEXT,
            created_at TEXT NOT NULL,
            finished_at TEXT
        );
        CREATE UNIQUE INDEX tinker_requests_seq ON tinker_requests(model_id, seq_id);
        CREATE INDEX tinker_requests_pending ON tinker_requests(model_id, status);
        CREATE TABLE tinker_samplers (
            id TEXT PRIMARY KEY,
            model_id TEXT NOT NULL,
            weights TEXT,                      -- a saved sampler checkpoint's folder; NULL: the base model
            created_at TEXT NOT NULL
        );
        """,
    ),
]


def dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), default=str)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, busy timeout, foreign keys on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                           check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection, *, immediate: bool = True) -> Iterator[sqlite3.Connection]:
    conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply pending migrations in order; returns the names applied now."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    applied_now: list[str] = []
    with transaction(conn):
        done = {row[0] for row in conn.execute("SELECT name FROM schema_migrations")}
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            for statement in _statements(sql):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)", (name, utcnow()))
            applied_now.append(name)
    return applied_now


def _statements(sql: str) -> list[str]:
    """Split a migration script on `;` at line ends (our migrations keep one statement per `;`)."""
    lines = [line.split("--", 1)[0] for line in sql.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


class Database:
    """One connection per thread to the backend's database file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[sqlite3.Connection] = []

    def conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def migrate(self) -> list[str]:
        return migrate(self.conn())

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        with transaction(self.conn()) as conn:
            yield conn

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._all.clear()
        self._local = threading.local()
