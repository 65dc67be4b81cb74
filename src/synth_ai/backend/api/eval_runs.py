"""Eval runs for the dashboard, read from trace databases (`BackendSettings.traces`) with `TraceReader`.

A configured path is a SQLite file or a folder whose `*.db`, `*.sqlite`, `*.sqlite3` files are read (not
recursively). Sessions are grouped into runs by their `eval_run_id` metadata (what `synth-ai eval` writes), else by
the task app's `run_id`; a session's score is its `official_score`, else its outcome reward. Databases are
addressed by a short hash of their absolute path, so a URL stays valid while files are added to a folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from synth_ai.errors import NotFoundError, SynthError

SUFFIXES = (".db", ".sqlite", ".sqlite3")
MAX_SESSIONS_PER_DB = 20_000  # a page, not an analysis tool: past this the runs list says it stopped reading
NO_RUN = "(no run id)"


def db_id(path: Path) -> str:
    return hashlib.sha256(str(path).encode()).hexdigest()[:12]


def trace_files(paths: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        candidates = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file()) if path.is_dir() \
            else [path] if path.is_file() else []
        found.extend(p for p in candidates if p not in found)
    return found


def _metadata(text: str | None) -> dict[str, Any]:
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _score(meta: dict[str, Any], total_reward: object) -> float | None:
    for value in (meta.get("official_score"), total_reward):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _open(path: Path):
    from synth_ai.tracing.reader import TraceReader

    return TraceReader(path)


def list_runs(paths: list[Path]) -> dict[str, Any]:
    """Every run in every configured database, with its seed count and mean score; unreadable files are listed
    with their error instead of failing the page. A database unchanged since the last call is not read again."""
    sources: list[dict[str, Any]] = [{"path": str(p), "exists": p.exists()} for p in paths]
    runs: list[dict[str, Any]] = []
    for file in trace_files(paths):
        file_runs, notes = _summary(file)
        runs.extend(dict(run) for run in file_runs)
        sources.extend(dict(note) for note in notes)
    runs.sort(key=lambda r: r["created_at"], reverse=True)
    return {"sources": sources, "runs": runs}


class _Summaries:
    """Each database's runs as last read, with the version they were read at (see `_version`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.found: dict[Path, tuple[tuple, list[dict[str, Any]], list[dict[str, Any]]]] = {}
        # One read-only connection per database, kept open: SQLite's data_version only moves between two reads
        # on the same connection. With the inode it was opened on, to notice a file replaced under the same name.
        self.watchers: dict[Path, tuple[int, sqlite3.Connection]] = {}
        self.scans = 0  # full reads so far (what tests count to see an unchanged database is not read again)


_SUMMARIES = _Summaries()


def scan_count() -> int:
    return _SUMMARIES.scans


def _summary(file: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    with _SUMMARIES.lock:
        version = _version(file)
        cached = _SUMMARIES.found.get(file)
        if version is not None and cached is not None and cached[0] == version:
            return cached[1], cached[2]
        _SUMMARIES.scans += 1
        runs, notes = _scan(file)
        if version is not None:
            _SUMMARIES.found[file] = (version, runs, notes)
        return runs, notes


def _version(file: Path) -> tuple | None:
    """What changes whenever the database does: the file's identity, size and mtime, its WAL's size and mtime
    (commits land there first) and SQLite's data_version (which also moves when a write keeps both the same).
    None when the file cannot be looked at (then it is read every time)."""
    try:
        inode = file.stat().st_ino
    except OSError:
        return None
    data_version = _data_version(file, inode)  # first: opening the watcher may create the WAL
    try:
        st = file.stat()
    except OSError:
        return None
    try:
        wal = os.stat(f"{file}-wal")
        wal_key: tuple | None = (wal.st_ino, wal.st_size, wal.st_mtime_ns)
    except OSError:
        wal_key = None
    return st.st_ino, st.st_size, st.st_mtime_ns, wal_key, data_version


def _data_version(file: Path, inode: int) -> int | None:
    watched = _SUMMARIES.watchers.get(file)
    if watched is not None and watched[0] != inode:
        watched[1].close()
        watched = None
    try:
        if watched is None:
            conn = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
            watched = _SUMMARIES.watchers[file] = (inode, conn)
        return int(watched[1].execute("PRAGMA data_version").fetchone()[0])
    except sqlite3.Error:  # not a database (yet): the stat fields alone say whether it changed
        dropped = _SUMMARIES.watchers.pop(file, None)
        if dropped is not None:
            dropped[1].close()
        return None


def _scan(file: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One database read in full: its runs, and notes for the sources list (an error, or where reading stopped)."""
    notes: list[dict[str, Any]] = []
    try:
        with _open(file) as reader:
            grouped: dict[str, dict[str, Any]] = {}
            for count, row in enumerate(reader.sessions()):
                if count >= MAX_SESSIONS_PER_DB:
                    notes.append({"path": str(file), "exists": True,
                                  "error": f"only the first {MAX_SESSIONS_PER_DB} sessions are shown"})
                    break
                meta = _metadata(row.metadata)
                run_id = str(meta.get("eval_run_id") or meta.get("run_id") or NO_RUN)
                run = grouped.setdefault(run_id, {
                    "db": db_id(file), "db_path": str(file), "run_id": run_id, "model": meta.get("model"),
                    "app_id": meta.get("app_id"), "created_at": str(row.created_at), "sessions": 0,
                    "scored": 0, "score_sum": 0.0})
                run["sessions"] += 1
                score = _score(meta, row.total_reward)
                if score is not None:
                    run["scored"] += 1
                    run["score_sum"] += score
    except SynthError as exc:
        return [], [{"path": str(file), "exists": True, "error": exc.message}]
    runs = []
    for run in grouped.values():
        total = run.pop("score_sum")
        run["mean_score"] = total / run["scored"] if run["scored"] else None
        runs.append(run)
    return runs, notes


def _file_of(paths: list[Path], wanted: str) -> Path:
    for file in trace_files(paths):
        if db_id(file) == wanted:
            return file
    raise NotFoundError(f"No configured trace database has id {wanted!r}.",
                        hint="Open the eval runs page again; the database may have been moved.")


def run_detail(paths: list[Path], database: str, run_id: str) -> dict[str, Any]:
    """Per-seed scores of one run."""
    file = _file_of(paths, database)
    seeds = []
    with _open(file) as reader:
        for row in reader.sessions():
            meta = _metadata(row.metadata)
            if str(meta.get("eval_run_id") or meta.get("run_id") or NO_RUN) != run_id:
                continue
            seed = meta.get("eval_seed", meta.get("seed"))
            seeds.append({"session_id": str(row.session_id), "seed": seed, "score": _score(meta, row.total_reward),
                          "outcome_score": meta.get("outcome_score"), "task_id": meta.get("task_id"),
                          "model": meta.get("model"), "created_at": str(row.created_at)})
    if not seeds:
        raise NotFoundError(f"No sessions of run {run_id!r} in {file}.")
    seeds.sort(key=lambda s: (s["seed"] is None, s["seed"] if isinstance(s["seed"], int) else 0, s["created_at"]))
    return {"db": database, "db_path": str(file), "run_id": run_id, "seeds": seeds}


def _parts(content: Any) -> list[dict[str, str]]:
    """A message's content as text and image parts. Images only as `data:image/…` URLs: the page works offline
    and never makes the browser fetch an address a trace chose."""
    if isinstance(content, str):
        return [{"kind": "text", "text": content}]
    if isinstance(content, list):
        parts: list[dict[str, str]] = []
        for part in content:
            if not isinstance(part, dict):
                parts.append({"kind": "text", "text": json.dumps(part, ensure_ascii=False)})
            elif part.get("type") == "text":
                parts.append({"kind": "text", "text": str(part.get("text", ""))})
            elif part.get("type") == "image_url":
                image = part.get("image_url")
                url = str(image.get("url", "") if isinstance(image, dict) else image or "")
                parts.append({"kind": "image", "url": url} if url.startswith("data:image/")
                             else {"kind": "text", "text": f"[image: {url[:200]}]"})
            else:
                parts.append({"kind": "text", "text": json.dumps(part, ensure_ascii=False)})
        return parts
    if content is None:
        return []
    return [{"kind": "text", "text": json.dumps(content, ensure_ascii=False)}]


def _message(message_type: str, raw: object) -> dict[str, Any]:
    doc: Any = raw
    if isinstance(raw, str):
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = raw
    if isinstance(doc, dict) and ("content" in doc or "role" in doc):
        parts = _parts(doc.get("content"))
        if doc.get("tool_calls"):
            parts.append({"kind": "text", "text": json.dumps(doc["tool_calls"], ensure_ascii=False)})
        return {"type": message_type, "role": str(doc.get("role") or message_type), "parts": parts}
    return {"type": message_type, "role": message_type, "parts": _parts(doc)}


def transcript(paths: list[Path], database: str, session_id: str) -> dict[str, Any]:
    file = _file_of(paths, database)
    with _open(file) as reader:
        row = next((r for r in reader.sessions() if str(r.session_id) == session_id), None)
        if row is None:
            raise NotFoundError(f"No session {session_id!r} in {file}.")
        messages = [_message(m.message_type, m.content) for m in reader.messages(session_id)]
    meta = _metadata(row.metadata)
    shown = {k: v for k, v in meta.items() if k not in {"prompt", "completion"}}
    return {"db": database, "session_id": session_id, "score": _score(meta, row.total_reward), "metadata": shown,
            "messages": messages}
