"""`synth-ai filter` on real trace databases written by our tracing store: every rule, ordering, shuffle/offset/
limit, errored sessions, message shapes (policy prompts, multimodal lists, tool calls), counts and exit codes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import run_cli
from filter_support import add_session, filter_config, read_jsonl

from synth_ai.errors import ExitCode
from synth_ai.tracing import TraceStore
from synth_ai.tracing.schema import ALL_STATEMENTS

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "math_submit", "arguments": "{\"answer\": \"4\"}"}}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "traces.db"
    with TraceStore(path) as store:
        day = "2026-01-{:02d}T00:00:00+00:00".format
        add_session(store, "s01", task_split="train", task_id="a", model="m1", judge_scores={"q": 0.9},
                    reward=1.0, created_at=day(1), seed=1, env_name="math", policy_name="p")
        add_session(store, "s02", task_split="train", task_id="b", model="m2", judge_scores={"q": 0.2},
                    reward=0.0, created_at=day(2))
        add_session(store, "s03", task_split="test", task_id="a", model="m1", judge_scores={"q": 0.5},
                    reward=1.0, created_at=day(3))
        add_session(store, "s04", task_split="test", task_id="c", model="m1", reward=0.5, created_at=day(4))
        add_session(store, "s05", task_split="train", task_id="a", model="m1", judge_scores={"q": 0.7},
                    reward=None, created_at=day(5))
        add_session(store, "s06", task_split="train", task_id="a", model="m1", status="error",
                    error="RolloutError: boom", reward=1.0, created_at=day(6))
        add_session(store, "s07", task_split="train", task_id="a", model="m1", status="timeout",
                    reward=1.0, created_at=day(7))
        add_session(store, "s08", turns=[], task_split="train", task_id="d", model="m1", prompt="2+2?",
                    completion="4", reward=1.0, created_at=day(8))
        add_session(store, "s09", turns=[("first", "one"), ("second", "two")], task_split="train", task_id="e",
                    model="m1", reward=1.0, created_at=day(9))
        add_session(store, "s10", turns=[("unanswered", None)], task_split="train", task_id="f", model="m1",
                    reward=1.0, created_at="2026-01-10 00:00:00.000000")  # SQLAlchemy's naive form
    return path


def run(cli, tmp_path: Path, db: Path, **keys):
    config = filter_config(tmp_path / "filter.toml", db, tmp_path / "out" / "train.jsonl", **keys)
    result = cli("--json", "filter", "--config", str(config))
    return result, tmp_path / "out" / "train.jsonl"


def sessions_of(path: Path) -> list[str]:
    return [r["metadata"]["session_id"] for r in read_jsonl(path)]


def test_no_rules_keeps_every_finished_session_in_time_order(cli, tmp_path, db):
    result, out = run(cli, tmp_path, db)
    assert result.exit_code == 0, result.stdout + result.stderr
    doc = result.json()
    assert doc["output"] == str(out) and doc["db"] == str(db)
    assert doc["sessions"] == {"total": 10, "read": 10, "kept": 8, "dropped": {"errored": 2, "no_examples": 0}}
    assert doc["examples"] == {"matched": 9, "skipped_by_offset": 0, "written": 9}
    assert sessions_of(out) == ["s01", "s02", "s03", "s04", "s05", "s08", "s09", "s09", "s10"]
    records = read_jsonl(out)
    assert records[0] == {
        "messages": [{"role": "user", "content": "question s01"}, {"role": "assistant", "content": "answer s01"}],
        "metadata": {"session_id": "s01", "env_name": "math", "policy_name": "p", "seed": 1, "total_reward": 1,
                     "achievements_count": 0, "model": "m1", "created_at": "2026-01-01T00:00:00+00:00"}}
    by_id = {(r["metadata"]["session_id"], r["messages"][0]["content"]): r for r in records}
    assert by_id[("s05", "question s05")]["metadata"]["total_reward"] is None  # no outcome row
    assert by_id[("s08", "2+2?")]["messages"][1] == {"role": "assistant", "content": "4"}  # metadata fallback
    assert by_id[("s09", "second")]["messages"][1]["content"] == "two"
    unanswered = by_id[("s10", "unanswered")]
    assert unanswered["messages"][1]["content"] == "[no response recorded]"
    assert unanswered["metadata"]["created_at"] == "2026-01-10T00:00:00+00:00"
    # one JSON document on stdout, nothing else
    assert result.stdout.strip().startswith("{") and result.stdout.strip().endswith("}")


@pytest.mark.parametrize(("keys", "expected", "rule", "dropped"), [
    ({"splits": ["test"]}, ["s03", "s04"], "splits", 6),
    ({"task_ids": ["a"]}, ["s01", "s03", "s05"], "task_ids", 5),
    ({"models": ["m2"]}, ["s02"], "models", 7),
    ({"min_official_score": 1.0}, ["s01", "s03", "s08", "s09", "s09", "s10"], "official_score", 3),
    ({"max_official_score": 0.5}, ["s02", "s04", "s05"], "official_score", 5),  # no score passes a maximum
    ({"min_official_score": 0.4, "max_official_score": 0.6}, ["s04"], "official_score", 7),
    ({"min_judge_scores": {"q": 0.5}}, ["s01", "s03", "s05"], "judge_scores", 5),  # no score fails a minimum
    ({"max_judge_scores": {"q": 0.5}}, ["s02", "s03", "s04", "s08", "s09", "s09", "s10"], "judge_scores", 2),
    ({"min_created_at": "2026-01-02T00:00:00Z", "max_created_at": "2026-01-04"}, ["s02", "s03", "s04"],
     "created_at", 5),
    ({"min_created_at": 1767830400}, ["s08", "s09", "s09", "s10"], "created_at", 5),  # epoch seconds (2026-01-08)
])
def test_each_rule(cli, tmp_path, db, keys, expected, rule, dropped):
    result, out = run(cli, tmp_path, db, **keys)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert sessions_of(out) == expected
    assert result.json()["sessions"]["dropped"][rule] == dropped
    assert result.json()["sessions"]["dropped"]["errored"] == 2  # applied before every other rule


def test_splits_and_official_score_combined_like_the_example(cli, tmp_path, db):
    result, out = run(cli, tmp_path, db, splits=["test"], min_official_score=1.0, limit=1000)
    assert result.exit_code == 0
    assert sessions_of(out) == ["s03"]
    assert result.json()["sessions"]["dropped"] == {"errored": 2, "splits": 6, "official_score": 1,
                                                   "no_examples": 0}


def test_limit_stops_reading(cli, tmp_path, db):
    result, out = run(cli, tmp_path, db, limit=3)
    assert result.exit_code == 0
    assert sessions_of(out) == ["s01", "s02", "s03"]
    doc = result.json()
    assert doc["stopped_at_limit"] is True and doc["sessions"]["read"] == 3


def test_limit_cuts_inside_a_multi_turn_session(cli, tmp_path, db):
    result, out = run(cli, tmp_path, db, task_ids=["e"], limit=1)
    assert [r["messages"][0]["content"] for r in read_jsonl(out)] == ["first"]


def test_shuffle_is_deterministic_and_offset_limit_apply_after_it(cli, tmp_path, db):
    _, out = run(cli, tmp_path, db)
    in_order = out.read_text()
    _, out = run(cli, tmp_path, db, shuffle=True, shuffle_seed=7)
    first = out.read_text()
    _, out = run(cli, tmp_path, db, shuffle=True, shuffle_seed=7)
    assert out.read_text() == first  # same seed, same bytes
    _, out = run(cli, tmp_path, db, shuffle=True, shuffle_seed=8)
    other = out.read_text()
    assert sorted(first.splitlines()) == sorted(in_order.splitlines()) == sorted(other.splitlines())
    assert first != in_order and other != first
    # a multi-turn session's records stay together and in turn order
    shuffled = read_jsonl(tmp_path / "out" / "train.jsonl")
    turns = [r["messages"][0]["content"] for r in shuffled if r["metadata"]["session_id"] == "s09"]
    assert turns == ["first", "second"]
    result, out = run(cli, tmp_path, db, shuffle=True, shuffle_seed=8, offset=2, limit=3)
    assert out.read_text().splitlines() == other.splitlines()[2:5]
    assert result.json()["examples"] == {"matched": 5, "skipped_by_offset": 2, "written": 3}
    _, out = run(cli, tmp_path, db, shuffle=True)  # no seed: seed 0, still repeatable
    default_seed = out.read_text()
    _, out = run(cli, tmp_path, db, shuffle=True, shuffle_seed=0)
    assert out.read_text() == default_seed


def test_offset_past_every_example_is_no_match(cli, tmp_path, db):
    result, out = run(cli, tmp_path, db, offset=50)
    assert result.exit_code == ExitCode.NO_MATCH == 12
    assert "All 9 matching examples were skipped by offset = 50" in result.json()["error"]["message"]
    assert not out.exists()


def test_nothing_matched_keeps_the_previous_output(cli, tmp_path, db):
    _, out = run(cli, tmp_path, db)
    before = out.read_bytes()
    config = filter_config(tmp_path / "none.toml", db, out, models=["nobody"])
    result = cli("filter", "--config", str(config))
    assert result.exit_code == ExitCode.NO_MATCH
    assert ("No sessions matched the provided filters. Adjust the filter thresholds or choose a different "
            "dataset.") in result.stderr
    assert "Read 10 sessions; dropped by rule: errored 2, models 8, no_examples 0." in result.stderr
    assert out.read_bytes() == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["train.jsonl"]  # no temporary file left behind


def test_human_output_counts(cli, tmp_path, db):
    config = filter_config(tmp_path / "f.toml", db, tmp_path / "h.jsonl", splits=["train"], min_official_score=1,
                           limit=2)
    result = cli("filter", "--config", str(config))
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"✓ Config validated: db={db}, output={tmp_path / 'h.jsonl'}"
    assert lines[1:3] == ["  → Filtering for official score >= 1.0", "  → Limiting to 2 examples"]
    assert "Read 8 sessions (of 10); dropped by rule: errored 2, splits 2, official_score 2, no_examples 0." in lines
    assert "Kept 2 sessions (2 examples, stopped at the limit)" in lines
    assert lines[-1] == f"Wrote 2 examples -> {tmp_path / 'h.jsonl'}"


def test_message_shapes_multimodal_tool_calls(cli, tmp_path):
    path = tmp_path / "shapes.db"
    user_parts = [{"type": "text", "text": "what do you see?"}, IMAGE]
    with TraceStore(path) as store:
        add_session(store, "vision", turns=[(user_parts, [{"type": "text", "text": "a tree"}])])
        add_session(store, "tools", turns=[("2+2?", {"role": "assistant", "content": None, "tool_calls": [CALL]})])
        add_session(store, "empty-user", turns=[("", "ignored"), ("kept", "yes")])
        add_session(store, "system-only", turns=[])
    result, out = run(cli, tmp_path, path)
    assert result.exit_code == 0, result.stdout
    records = {r["metadata"]["session_id"]: r["messages"] for r in read_jsonl(out)}
    assert records["vision"] == [{"role": "user", "content": user_parts},
                                 {"role": "assistant", "content": [{"type": "text", "text": "a tree"}]}]
    assert records["tools"][1] == {"role": "assistant", "content": "", "tool_calls": [CALL]}
    assert records["empty-user"] == [{"role": "user", "content": "kept"}, {"role": "assistant", "content": "yes"}]
    assert "system-only" not in records
    assert result.json()["sessions"]["dropped"]["no_examples"] == 1
    validated = cli("files", "validate", str(out))
    assert validated.exit_code == 0, validated.stdout
    assert "3 examples, 6 turns, 1 images" in validated.stdout


def _db_without_message_check(path: Path) -> sqlite3.Connection:
    """A later synth-ai's trace DB, whose messages table accepts the policy_* message types."""
    conn = sqlite3.connect(path)
    for statement in ALL_STATEMENTS:
        conn.execute(statement.replace(
            ",\n        CONSTRAINT check_message_type CHECK (message_type IN ('user', 'assistant', 'system', "
            "'tool_use', 'tool_result'))", ""))
    return conn


def test_policy_prompt_message_types(cli, tmp_path):
    path = tmp_path / "policy.db"
    conn = _db_without_message_check(path)
    conn.execute("INSERT INTO session_traces (session_id, created_at, metadata) VALUES ('p', '2026-01-01', '{}')")
    rows = [("policy_system_prompt", "You are an agent."), ("policy_user_prompt", json.dumps({"content": "turn 1"})),
            ("assistant", json.dumps({"role": "assistant", "content": "move left"})),
            ("policy_user_prompt", "turn 2"), ("policy_system_prompt", "new episode"),
            ("assistant", "late reply"), ("user", json.dumps({"payload": {"content": "wrapped"}})),
            ("assistant", json.dumps({"json_payload": json.dumps({"content": "from payload"})})),
            # 0.2.17's crafter app stores a tool-call reply as the JSON text of its calls
            ("user", "act"), ("assistant", json.dumps([{"tool_name": "interact", "arguments": {"action": "do"}}]))]
    conn.executemany("INSERT INTO messages (session_id, message_type, content, timestamp) VALUES ('p', ?, ?, ?)",
                     [(t, c, f"2026-01-01T00:00:{i:02d}") for i, (t, c) in enumerate(rows)])
    conn.commit()
    conn.close()
    result, out = run(cli, tmp_path, path)
    assert result.exit_code == 0, result.stdout
    assert [r["messages"] for r in read_jsonl(out)] == [
        [{"role": "user", "content": "turn 1"}, {"role": "assistant", "content": "move left"}],
        [{"role": "user", "content": "turn 2"}, {"role": "assistant", "content": "[no response recorded]"}],
        [{"role": "user", "content": "wrapped"}, {"role": "assistant", "content": "from payload"}],
        [{"role": "user", "content": "act"}, {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "interact", "arguments": "{\"action\": \"do\"}"}}]}],
    ]
    validated = cli("files", "validate", str(out))
    assert validated.exit_code == 0, validated.stdout


def test_empty_database_is_no_match(cli, tmp_path):
    path = tmp_path / "empty.db"
    TraceStore(path).close()
    result, _ = run(cli, tmp_path, path)
    assert result.exit_code == ExitCode.NO_MATCH
    assert result.json()["error"]["message"] == f"No traces found in database ({path})."


def test_missing_and_foreign_databases(cli, tmp_path):
    result, out = run(cli, tmp_path, tmp_path / "nope.db")
    assert result.exit_code == ExitCode.NOT_FOUND
    assert result.json()["error"]["message"] == f"Trace database not found: {tmp_path / 'nope.db'}"
    assert not (tmp_path / "nope.db").exists()  # reading never creates a database

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE jobs (id TEXT)")
    result, _ = run(cli, tmp_path, other)
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "is not a trace database: it has no `session_traces` table (tables found: jobs)" in \
        result.json()["error"]["message"]

    text = tmp_path / "notes.db"
    text.write_text("not sqlite at all " * 100)
    result, _ = run(cli, tmp_path, text)
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "is not a readable SQLite trace database" in result.json()["error"]["message"]
    assert "Traceback" not in result.stdout + result.stderr


def test_database_url_forms(cli, tmp_path, db):
    result, out = run(cli, tmp_path, f"sqlite+aiosqlite:///{db}", task_ids=["b"])
    assert result.exit_code == 0 and sessions_of(out) == ["s02"]
    result, _ = run(cli, tmp_path, "postgresql://host/db")
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "Only SQLite trace databases are supported" in result.json()["error"]["message"]


@pytest.mark.parametrize(("body", "key", "line", "message"), [
    ('db = "t.db"\noutput = "o.jsonl"\nlimit = 0\n', "[filter].limit", 4, "greater than zero"),
    ('db = "t.db"\noutput = "o.csv"\n', "[filter].output", 3, "must end in .jsonl or .json"),
    ('db = "t.db"\noutput = "o.jsonl"\nmin_official_score = 0.9\nmax_official_score = 0.1\n',
     "[filter].min_official_score", 4, "is above max_official_score"),
    ('output = "o.jsonl"\n', "[filter].db", None, "required key is missing"),
])
def test_broken_configs_name_key_and_line(cli, tmp_path, body, key, line, message):
    config = tmp_path / "broken.toml"
    config.write_text("[filter]\n" + body)
    result = cli("filter", "--config", str(config))
    assert result.exit_code == ExitCode.INVALID_INPUT, result.stderr
    where = f"broken.toml:{line}: {key}" if line else f"{key}"
    assert where in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_config_and_missing_table(cli, tmp_path):
    result = cli("filter", "--config", str(tmp_path / "absent.toml"))
    assert result.exit_code == ExitCode.NOT_FOUND and "Config not found" in result.stderr
    config = tmp_path / "t.toml"
    config.write_text('db = "x.db"\n')
    result = cli("filter", "--config", str(config))
    assert result.exit_code == ExitCode.INVALID_INPUT and "needs a [filter] table" in result.stderr


def test_example_config_works_as_written(cli, tmp_path):
    example = Path(__file__).resolve().parents[1] / "examples" / "configs" / "filter_math.toml"
    work = tmp_path / "project"
    (work / "traces" / "v3").mkdir(parents=True)
    with TraceStore(work / "traces" / "v3" / "synth_ai.db") as store:
        add_session(store, "right", task_split="test", reward=1.0)
        add_session(store, "wrong", task_split="test", reward=0.0)
        add_session(store, "train", task_split="train", reward=1.0)
    import os
    os.chdir(work)
    result = cli("filter", "--config", str(example))
    assert result.exit_code == 0, result.stderr
    assert sessions_of(work / "ft_data" / "math_correct.jsonl") == ["right"]


def test_corrupt_database_mid_read_is_a_clear_error_and_keeps_the_output(cli, tmp_path):
    path = tmp_path / "big.db"
    with TraceStore(path) as store:
        for i in range(300):
            add_session(store, f"s{i:03d}", turns=[("q" * 200, "a" * 200)])
    out = tmp_path / "out" / "train.jsonl"
    out.parent.mkdir()
    out.write_text("previous\n")
    size = path.stat().st_size
    with path.open("r+b") as handle:  # schema page intact, table pages garbage
        handle.seek(size // 2)
        handle.write(b"\xff" * (size // 2 - 4096))
    result, _ = run(cli, tmp_path, path)
    assert result.exit_code == ExitCode.INVALID_INPUT, result.stdout
    assert f"Reading the trace database {path} failed" in result.json()["error"]["message"]
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in out.parent.iterdir()) == ["train.jsonl"]


def test_every_errored_marking_is_dropped(cli, tmp_path):
    path = tmp_path / "errors.db"
    with TraceStore(path) as store:
        add_session(store, "ok", status="ok", error=None, timed_out=False)
        add_session(store, "error-text", error="HTTP 500: boom")
        add_session(store, "error-object", error={"code": "rollout_failed"})
        add_session(store, "timed-out", timed_out=True)
        add_session(store, "failed-any-case", status="Failed")
        add_session(store, "cancelled", status="cancelled")
    result, out = run(cli, tmp_path, path)
    assert result.exit_code == 0, result.stdout
    assert sessions_of(out) == ["ok"]
    assert result.json()["sessions"]["dropped"]["errored"] == 5


def test_relative_db_resolves_from_the_working_directory_then_the_config_folder(cli, tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    with TraceStore(project / "configs" / "beside.db") as store:
        add_session(store, "beside")
    config = filter_config(project / "configs" / "f.toml", "beside.db", "out.jsonl")
    monkeypatch.chdir(project)
    result = cli("--json", "filter", "--config", str(config))
    assert result.exit_code == 0, result.stdout
    assert result.json()["db"] == str(project / "configs" / "beside.db")
    assert sessions_of(project / "out.jsonl") == ["beside"]  # the output stays relative to the working directory
    with TraceStore(project / "beside.db") as store:
        add_session(store, "cwd")
    result = cli("--json", "filter", "--config", str(config))
    assert sessions_of(project / "out.jsonl") == ["cwd"]


def test_bare_filter_uses_the_only_filter_config_here_and_refuses_to_guess(isolated_home: Path):
    """The product docs run a bare `synth-ai filter`: one filter config in the working directory is used; none or
    several is an error that names them (exit 8 / 3), and nothing is written."""
    none = run_cli("filter")
    assert none.exit_code == 8 and "No filter config" in none.stderr and "--config" in none.stderr
    body = '[filter]\ndb = "missing.db"\noutput = "out.jsonl"\n'
    (isolated_home / "a.toml").write_text(body)
    one = run_cli("filter")
    assert one.exit_code == 8 and "Using config:" in one.stdout and "missing.db" in one.stderr
    (isolated_home / "sub").mkdir()
    (isolated_home / "sub" / "b.toml").write_text(body)
    several = run_cli("filter")
    assert several.exit_code == 3 and "2 filter configs" in several.stderr
    assert "a.toml" in several.stderr and "b.toml" in several.stderr
    assert not (isolated_home / "out.jsonl").exists()
