"""Trace databases and synth-ai 0.2.17 (when its virtualenv from `bench/reference_env.py` is present): the
reference's `eval` run against our served math app writes a DB whose tables and columns ours contains, whose
sessions carry the same metadata keys and the same messages as ours for the same seed, and to which our `eval`
appends without a migration."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
from conftest import free_port, run_cli
from eval_support import answering_policy, by_seed, write_config
from reference_support import REF_CLI
from taskapp_support import ENV_KEY, scripted_model, stop, subprocess_env, synth_ai_command, wait_for_health

pytestmark = [pytest.mark.slow, pytest.mark.reference_venv]

REFERENCE_METADATA = {"eval_seed", "prompt_index", "task_id", "task_split", "task_rubric_id", "official_score",
                      "judge_scores", "model", "prompt", "completion"}


def _columns(db: Path) -> dict[str, list[str]]:
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                                             "AND name NOT LIKE 'sqlite_%'")]
        return {t: [c[1] for c in conn.execute(f'PRAGMA table_info("{t}")')] for t in tables}


def _messages(db: Path, session_id: str) -> list[tuple[str, object]]:
    """The filter's query (reference §6.2), contents decoded."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT message_type, content, timestamp FROM messages WHERE session_id = ? "
                            "ORDER BY timestamp ASC, id ASC", (session_id,)).fetchall()
    return [(kind, json.loads(content)) for kind, content, _ in rows]


def test_reference_eval_db_and_ours_agree(isolated_home: Path, tmp_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen([*synth_ai_command(), "serve", "math-single-step", "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, text=True, env=subprocess_env(ENVIRONMENT_API_KEY=ENV_KEY),
                              cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    ref_db, our_db = tmp_path / "ref.db", tmp_path / "ours.db"
    (tmp_path / "app.env").write_text(f"ENVIRONMENT_API_KEY={ENV_KEY}\n")
    try:
        wait_for_health(url, process=server)
        with scripted_model(answering_policy(right={0})) as (model_url, _):
            config = write_config(tmp_path / "eval_ref.toml", model_url, seeds=[0, 1], concurrency=1)
            env = subprocess_env(HOME=str(tmp_path), ENVIRONMENT_API_KEY=ENV_KEY)
            env.pop("SYNTH_API_KEY", None)
            reference = subprocess.run(
                [str(REF_CLI), "eval", "math-single-step", "--config", str(config), "--url", url, "--env-file",
                 str(tmp_path / "app.env"), "--trace-db", str(ref_db), "--split", "test"],
                cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
            assert reference.returncode == 0, reference.stdout[-3000:] + reference.stderr[-3000:]
            assert "Eval complete: 2 ok, 0 failed" in reference.stdout
            ours = run_cli("--json", "eval", "--config", str(config), "--url", url, "--env-file",
                           str(tmp_path / "app.env"), "--trace-db", str(our_db))
            assert ours.exit_code == 0, ours.stdout + ours.stderr
            appended = run_cli("--json", "eval", "--config", str(config), "--url", url, "--seeds", "2",
                               "--trace-db", str(ref_db))
            assert appended.exit_code == 0, appended.stdout + appended.stderr
    finally:
        stop(server)

    ref_columns, our_columns = _columns(ref_db), _columns(our_db)
    for table, columns in ref_columns.items():
        assert table in our_columns, f"table {table} missing from our schema"
        assert set(columns) <= set(our_columns[table]), (table, set(columns) - set(our_columns[table]))

    ref_sessions, our_sessions = by_seed(ref_db), by_seed(our_db)
    assert sorted(ref_sessions) == [0, 1, 2] and sorted(our_sessions) == [0, 1]  # ours appended seed 2 to theirs
    for seed in (0, 1):
        theirs, mine = ref_sessions[seed], our_sessions[seed]
        assert REFERENCE_METADATA <= set(theirs["metadata"]) and REFERENCE_METADATA <= set(mine["metadata"])
        assert theirs["metadata"]["official_score"] == mine["metadata"]["official_score"] == (1.0 if seed == 0
                                                                                             else 0.0)
        assert _messages(ref_db, theirs["session_id"]) == _messages(our_db, mine["session_id"])
        assert [k for k, _ in _messages(our_db, mine["session_id"])] == ["system", "user", "assistant"]
        assert theirs["outcomes"] == []  # the reference stores no outcome row; ours does, for the filter
        assert mine["outcomes"] == [(1 if seed == 0 else 0, 0)]
    assert ref_sessions[2]["outcomes"] == [(0, 0)] and ref_sessions[2]["metadata"]["task_split"] == "test"
