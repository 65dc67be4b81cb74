"""The dashboard's eval runs list reads each trace database once and again only after it changed: a session written
since the last request shows up on the next one, and an unchanged database is not read again (counted with
`eval_runs.scan_count`, on real SQLite files written by the real trace store)."""

from __future__ import annotations

from pathlib import Path

from dashboard_support import write_eval_traces

from synth_ai.backend.api import eval_runs
from synth_ai.tracing.session import SessionRecorder
from synth_ai.tracing.store import TraceStore


def _runs(paths: list[Path]) -> list[tuple[str, int]]:
    return sorted((run["run_id"], run["sessions"]) for run in eval_runs.list_runs(paths)["runs"])


def _write_session(path: Path, run_id: str, store: TraceStore | None = None) -> None:
    rec = SessionRecorder(metadata={"eval_run_id": run_id, "eval_seed": 9, "official_score": 1.0})
    rec.message("user", {"role": "user", "content": "hi"})
    rec.set_outcome(1.0)
    if store is not None:
        store.write(rec)
        return
    with TraceStore(path) as fresh:
        fresh.write(rec)


def test_unchanged_database_is_not_read_again_and_a_new_session_shows_next_time(tmp_path: Path):
    db = write_eval_traces(tmp_path / "evals.db", run_id="eval_a")
    other = write_eval_traces(tmp_path / "other.db", run_id="eval_b")
    paths = [tmp_path]
    assert _runs(paths) == [("eval_a", 3), ("eval_b", 3)]
    scans = eval_runs.scan_count()
    assert _runs(paths) == [("eval_a", 3), ("eval_b", 3)]
    assert eval_runs.scan_count() == scans, "nothing changed, so nothing is read again"

    _write_session(db, "eval_a")
    assert _runs(paths) == [("eval_a", 4), ("eval_b", 3)]
    assert eval_runs.scan_count() == scans + 1, "only the database that changed is read again"
    assert other.exists()


def test_a_write_through_a_connection_that_stays_open_shows_up(tmp_path: Path):
    """The writer keeps its connection (and so the WAL) open, as a running `synth-ai eval` does."""
    db = tmp_path / "live.db"
    with TraceStore(db) as store:
        _write_session(db, "eval_live", store)
        assert _runs([db]) == [("eval_live", 1)]
        for expected in (2, 3):
            _write_session(db, "eval_live", store)
            assert _runs([db]) == [("eval_live", expected)]


def test_a_database_replaced_under_the_same_name_is_read_again(tmp_path: Path):
    db = write_eval_traces(tmp_path / "evals.db", run_id="eval_old")
    assert _runs([db]) == [("eval_old", 3)]
    replacement = write_eval_traces(tmp_path / "new.db", run_id="eval_new")
    replacement.replace(db)
    assert _runs([db]) == [("eval_new", 3)]


def test_a_file_that_is_not_a_database_keeps_its_error(tmp_path: Path):
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite")
    for _ in range(2):
        doc = eval_runs.list_runs([junk])
        assert doc["runs"] == []
        assert "not a readable SQLite trace database" in doc["sources"][-1]["error"]
