"""Rollouts recorded in the traces v3 SQLite schema: tables, constraints, rows per rollout, no secrets."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import httpx
import pytest
from taskapp_support import (
    ENV_KEY,
    completion,
    headers,
    math_entry,
    rollout_body,
    running_app,
    scripted_model,
    tool_call,
)

from synth_ai.taskapp import create_task_app
from synth_ai.taskapp.tracing import TracingSettings, resolve_db_path, tracing_environment
from synth_ai.tracing import SessionRecorder, TraceStore, db_path_from_url

SECRET = "sk-openai-planted-secret-987654321"


def _columns(conn, table):
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def test_schema_matches_traces_v3(tmp_path):
    db = tmp_path / "t.db"
    TraceStore(db).close()
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        names = {r[0]: r[1] for r in rows}
        for table in ("session_traces", "session_timesteps", "events", "messages", "outcome_rewards",
                      "event_rewards", "experiments", "systems", "system_versions", "experimental_systems"):
            assert names.get(table) == "table", table
        for view in ("model_usage_stats", "session_summary", "experiment_overview"):
            assert names.get(view) == "view", view
        for index in ("idx_session_created", "idx_event_type", "idx_message_type", "idx_outcome_rewards_session",
                      "idx_event_rewards_key", "idx_timestep_session_step"):
            assert names.get(index) == "index", index
        assert _columns(conn, "session_traces") == ["session_id", "created_at", "num_timesteps", "num_events",
                                                    "num_messages", "metadata", "experiment_id", "embedding"]
        assert _columns(conn, "outcome_rewards") == ["id", "session_id", "total_reward", "achievements_count",
                                                     "total_steps", "created_at", "reward_metadata"]
        assert _columns(conn, "event_rewards") == ["id", "event_id", "session_id", "message_id", "turn_number",
                                                   "reward_value", "reward_type", "key", "annotation", "source",
                                                   "created_at"]
        assert "call_records" in _columns(conn, "events") and "system_state_after" in _columns(conn, "events")
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.execute("INSERT INTO session_traces (session_id, created_at) VALUES ('s', 'now')")
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("INSERT INTO events (session_id, event_type) VALUES ('s', 'bogus')")
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("INSERT INTO messages (session_id, message_type, content) VALUES ('s', 'observation', 'x')")


def test_recorder_writes_every_kind_of_row(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # known secrets are scrubbed from every stored string
    rec = SessionRecorder(metadata={"task_split": "train", "api_key": SECRET})
    rec.timestep("turn-0")
    rec.message("user", {"role": "user", "content": f"hello {SECRET}"})
    lm = rec.lm_call(model_name="m", provider="custom", input_tokens=3, output_tokens=4,
                     call_records={"request": {"messages": []}})
    rec.runtime_event(actions=["noop"])
    env = rec.environment_event(reward=1.0, terminated=False, system_state_after={"x": 1})
    rec.event_reward(env, 1.0, reward_type="achievement_delta", key="collect_wood", source="environment")
    rec.event_reward(lm, 0.25, reward_type="shaped", source="evaluator")
    rec.timestep("turn-1")
    rec.message("assistant", "done")
    rec.set_outcome(2, achievements_count=1)
    with pytest.raises(ValueError):
        rec.message("observation", "x")
    with TraceStore(tmp_path / "t.db") as store:
        store.write(rec)
        store.write(rec)  # rewriting a session replaces it
    with sqlite3.connect(tmp_path / "t.db") as conn:
        row = conn.execute("SELECT num_timesteps, num_events, num_messages, metadata FROM session_traces").fetchone()
        assert row[:3] == (2, 3, 2)
        assert json.loads(row[3])["task_split"] == "train"
        assert conn.execute("SELECT COUNT(*) FROM session_timesteps").fetchone()[0] == 2
        assert conn.execute("SELECT total_tokens FROM events WHERE event_type='cais'").fetchone()[0] == 7
        rewards = conn.execute("SELECT reward_type, key, turn_number FROM event_rewards ORDER BY id").fetchall()
        assert rewards == [("achievement_delta", "collect_wood", 0), ("shaped", None, 0)]
        assert conn.execute("SELECT total_reward, achievements_count, total_steps FROM outcome_rewards"
                            ).fetchone() == (2, 1, 2)
        dump = "\n".join(str(r) for t in ("session_traces", "events", "messages")
                         for r in conn.execute(f"SELECT * FROM {t}"))
    assert SECRET not in dump


def test_traced_math_rollout_rows_and_no_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    db = tmp_path / "traces" / "synth_ai.db"
    for name, value in tracing_environment(tmp_path / "traces", None).items():
        monkeypatch.setenv(name, value)
    settings = TracingSettings.from_env()
    assert settings.enabled and settings.db_path == db and settings.sft_output_dir == tmp_path / "traces"
    entry = math_entry()
    module = __import__("sys").modules[entry.config_factory.__module__]
    expected = module.expected_answer(module.pick("train", 7)[1])
    with running_app(create_task_app(entry.config_factory())) as base:
        with scripted_model(lambda body: completion(tool_calls=[tool_call("math_submit", {"answer": expected})])) \
                as (model_url, _):
            body = rollout_body(f"{model_url}?cid=cid-7", seed=7, mode="rl", api_key=SECRET)
            body["record"] = {"return_trace": True, "trace_format": "structured"}
            doc = httpx.post(f"{base}/rollout", json=body, headers=headers(), timeout=30).json()
    trace = doc["trace"]
    assert trace["decision_rewards"] == [1.0] and trace["lm_calls"] == 1
    steps = trace["session_trace"]["session_time_steps"]
    assert steps[0]["step_id"] == "math_step" and len(steps[0]["events"]) == 2
    assert [m["message_type"] for m in trace["session_trace"]["markov_blanket_message_history"]] == \
        ["system", "user", "assistant"]
    with sqlite3.connect(db) as conn:
        meta = json.loads(conn.execute("SELECT metadata FROM session_traces").fetchone()[0])
        assert meta["task_split"] == "train" and meta["trace_correlation_id"] == "cid-7" and meta["mode"] == "rl"
        assert meta["task_id"].startswith("math_single_step:train:")
        cais = conn.execute("SELECT model_name, provider, input_tokens, output_tokens, call_records, timestep_id "
                            "FROM events WHERE event_type='cais'").fetchone()
        assert cais[:4] == ("scripted-model", "custom", 11, 7) and cais[5] is not None
        assert json.loads(cais[4])["request"]["tools"][0]["function"]["name"] == "math_submit"
        env = conn.execute("SELECT reward, terminated FROM events WHERE event_type='environment'").fetchone()
        assert env == (1.0, 1)
        assert conn.execute("SELECT reward_value, reward_type, source FROM event_rewards").fetchone() == \
            (1.0, "sparse", "environment")
        assert conn.execute("SELECT total_reward, total_steps FROM outcome_rewards").fetchone() == (1, 1)
        user = conn.execute("SELECT content FROM messages WHERE message_type='user'").fetchone()[0]
        assert json.loads(user)["content"] == module.pick("train", 7)[1]["problem"]
        everything = "\n".join(str(r) for t in ("session_traces", "events", "messages", "event_rewards")
                               for r in conn.execute(f"SELECT * FROM {t}"))
    assert SECRET not in everything and ENV_KEY not in everything
    sft = list((tmp_path / "traces").glob("run-7_*.jsonl"))
    assert len(sft) == 1
    record = json.loads(sft[0].read_text().splitlines()[0])
    assert record["assistant"]["tool_calls"][0]["function"]["name"] == "math_submit"
    assert SECRET not in sft[0].read_text()


def test_untraced_app_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.chdir(tmp_path)
    with running_app(create_task_app(math_entry().config_factory())) as base:
        with scripted_model(lambda body: completion(content="no idea")) as (model_url, _):
            doc = httpx.post(f"{base}/rollout", json=rollout_body(model_url), headers=headers(), timeout=30).json()
    assert doc["trace"] is None and not (tmp_path / "traces").exists()


def test_db_location_precedence(tmp_path):
    sqld_dir = tmp_path / "sqld"
    sqld_dir.mkdir()
    assert resolve_db_path({"TURSO_LOCAL_DB_URL": f"sqlite+aiosqlite:///{tmp_path}/a.db",
                            "SQLD_DB_PATH": str(tmp_path / "b.db")}) == tmp_path / "a.db"
    assert resolve_db_path({"SQLD_DB_PATH": str(sqld_dir)}) == sqld_dir / "dbs" / "default" / "data"
    assert resolve_db_path({"TASKAPP_TRACE_DB_PATH": str(tmp_path / "c.db")}) == tmp_path / "c.db"
    assert db_path_from_url("sqlite:///rel.db").as_posix() == "rel.db"
    assert TracingSettings.from_env({}).enabled is False


def test_concurrent_rollouts_each_get_a_session(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    db = tmp_path / "c.db"
    settings = TracingSettings(enabled=True, db_path=db)
    app = create_task_app(math_entry().config_factory(), tracing=settings)
    with running_app(app) as base, \
            scripted_model(lambda body: completion(tool_calls=[tool_call("math_submit", {"answer": "0"})])) \
            as (model_url, _):
        async def run_all():
            async with httpx.AsyncClient(timeout=60) as client:
                return await asyncio.gather(*[
                    client.post(f"{base}/rollout", json=rollout_body(model_url, seed=i), headers=headers())
                    for i in range(16)])

        responses = asyncio.run(run_all())
    assert all(r.status_code == 200 for r in responses)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM session_traces").fetchone()[0] == 16
        assert conn.execute("SELECT COUNT(*) FROM events WHERE event_type='cais'").fetchone()[0] == 16
        assert conn.execute("SELECT COUNT(DISTINCT session_id) FROM outcome_rewards").fetchone()[0] == 16
