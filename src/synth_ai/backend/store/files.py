"""File records: an uploaded blob with a name, a purpose and a validation status.

Status: `uploaded` (blob stored) → `processing` (validation running) → `ready`, or `invalid` with the validator's
per-line errors. Only SFT datasets (purpose `fine-tune` and its spellings) are validated, with the same validator
the client runs (`synth_ai.datasets.validate_jsonl`); other purposes are `ready` once stored. Validation results
are reused for identical content (same sha256).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

from synth_ai.backend.store.blobs import BlobStore, ReceivedUpload
from synth_ai.backend.store.db import Database, dumps, loads, utcnow
from synth_ai.backend.store.job_records import new_id

log = logging.getLogger("synth_ai.backend.store.files")

DATASET_PURPOSES = frozenset({"fine-tune", "fine_tune", "finetune", "sft", "training", "validation",
                              "fine-tune-validation"})
PURPOSES_HINT = "Use purpose=fine-tune for SFT datasets (JSONL); other purposes are stored without validation."
MAX_STORED_ERRORS = 100


class FileService:
    def __init__(self, db: Database, blobs: BlobStore) -> None:
        self.db = db
        self.blobs = blobs

    # Reading ----------------------------------------------------------------------------------------------------
    def get(self, file_id: str) -> sqlite3.Row | None:
        return self.db.conn().execute("SELECT * FROM files WHERE id = ?", (file_id,)).fetchone()

    def list(self, *, purpose: str | None = None, limit: int = 100, offset: int = 0) -> list[sqlite3.Row]:
        sql, args = "SELECT * FROM files", []
        if purpose:
            sql += " WHERE purpose = ?"
            args.append(purpose)
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?"
        args += [limit, offset]
        return list(self.db.conn().execute(sql, args))

    def path(self, row: sqlite3.Row) -> Path:
        return self.blobs.path_for(row["sha256"])

    # Writing ----------------------------------------------------------------------------------------------------
    def insert(self, conn: sqlite3.Connection, upload: ReceivedUpload, purpose: str) -> str:
        """Record an upload whose blob is already committed (inside the caller's transaction)."""
        file_id = new_id("file")
        now = utcnow()
        conn.execute(
            "INSERT INTO files (id, filename, purpose, bytes, sha256, content_type, status, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, 'uploaded', ?, ?)",
            (file_id, upload.filename, purpose, upload.size, upload.sha256, upload.content_type, now, now))
        return file_id

    def needs_validation(self, row: sqlite3.Row) -> bool:
        return row["purpose"] in DATASET_PURPOSES

    def reuse_validation(self, file_id: str) -> bool:
        """Copy the outcome of an earlier validation of identical content; True when one existed."""
        row = self.get(file_id)
        if row is None:
            return False
        prior = self.db.conn().execute(
            "SELECT status, errors, error_count, summary FROM files WHERE sha256 = ? AND id != ? "
            "AND status IN ('ready', 'invalid') AND purpose IN (%s) ORDER BY created_at LIMIT 1"
            % ",".join("?" * len(DATASET_PURPOSES)),
            (row["sha256"], file_id, *sorted(DATASET_PURPOSES))).fetchone()
        if prior is None:
            return False
        with self.db.tx() as conn:
            conn.execute("UPDATE files SET status = ?, errors = ?, error_count = ?, summary = ?, updated_at = ? "
                         "WHERE id = ?", (prior["status"], prior["errors"], prior["error_count"], prior["summary"],
                                          utcnow(), file_id))
        return True

    def validate(self, file_id: str) -> None:
        """Run the dataset validator on a stored file and record `ready` or `invalid` (blocking)."""
        row = self.get(file_id)
        if row is None:
            return
        if not self.needs_validation(row):
            self._set(file_id, "ready")
            return
        if self.reuse_validation(file_id):
            return
        self._set(file_id, "processing")
        try:
            status, errors, error_count, summary = run_validator(self.path(row))
        except Exception as exc:  # a validator crash must not leave the file `processing` forever
            log.exception("validating %s failed", file_id)
            status, errors, error_count, summary = "invalid", [
                {"line": None, "message": f"The backend could not validate this file: {type(exc).__name__}: {exc}"}
            ], 1, None
        self._set(file_id, status, errors=errors, error_count=error_count, summary=summary)

    def mark_processing(self, file_id: str) -> None:
        self._set(file_id, "processing")

    def _set(self, file_id: str, status: str, *, errors: list[dict[str, Any]] | None = None, error_count: int = 0,
             summary: dict[str, Any] | None = None) -> None:
        with self.db.tx() as conn:
            conn.execute("UPDATE files SET status = ?, errors = ?, error_count = ?, summary = ?, updated_at = ? "
                         "WHERE id = ?", (status, dumps(errors) if errors else None, error_count, dumps(summary),
                                          utcnow(), file_id))

    def pending_validation(self) -> list[str]:
        """Files whose validation never finished (the backend stopped in between)."""
        rows = self.db.conn().execute("SELECT id FROM files WHERE status IN ('uploaded', 'processing')")
        return [r["id"] for r in rows]

    def delete(self, conn: sqlite3.Connection, row: sqlite3.Row) -> bool:
        """Delete the record (caller's transaction); True when no other record uses the blob any more."""
        conn.execute("DELETE FROM files WHERE id = ?", (row["id"],))
        others = conn.execute("SELECT COUNT(*) FROM files WHERE sha256 = ?", (row["sha256"],)).fetchone()[0]
        return others == 0


def run_validator(path: Path) -> tuple[str, list[dict[str, Any]], int, dict[str, Any] | None]:
    """(status, errors, error_count, summary) from the shared SFT dataset validator."""
    from synth_ai.datasets import validate_jsonl

    report = validate_jsonl(path, max_errors=MAX_STORED_ERRORS)
    doc = report.to_dict()
    summary = dict(doc.get("summary") or {})
    if doc.get("warning_count"):
        summary["warning_count"] = doc["warning_count"]
        summary["warnings"] = doc.get("warnings", [])[:20]
    errors = [{"line": e.get("line"), "message": e.get("message")} for e in doc.get("errors", [])]
    return ("ready" if report.ok else "invalid"), errors, int(doc.get("error_count") or len(errors)), summary


def file_json(row: sqlite3.Row) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": row["id"],
        "object": "file",
        "filename": row["filename"],
        "purpose": row["purpose"],
        "bytes": row["bytes"],
        "sha256": row["sha256"],
        "content_type": row["content_type"],
        "status": row["status"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }
    summary = loads(row["summary"])
    if summary:
        doc["summary"] = summary
    if row["status"] == "invalid":
        doc["errors"] = loads(row["errors"]) or []
        doc["error_count"] = row["error_count"]
    return doc
