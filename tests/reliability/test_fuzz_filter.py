"""Fuzzing `synth-ai filter` (`synth_ai.filter`) with hypothesis.

Each example builds a trace database as another writer might have left it (the columns the reader needs, no
constraints, so any SQLite value can sit in any cell: odd created_at, metadata that is not JSON or not an
object, NaN or text rewards, message contents of every stored shape, blobs) and a `[filter]` config with random
rules, then runs the filter. Properties:
- it writes a file or raises a `SynthError` (nothing else escapes);
- a file it writes is an SFT dataset `files validate` accepts (docs/filter.md promises this), with as many
  records as it reported, each from a session that passes the rules;
- no file is left behind when it raises, and nothing is written beside the output but the output.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth_ai.config.loader import load_config
from synth_ai.datasets import validate_jsonl
from synth_ai.errors import SynthError
from synth_ai.filter.flow import run_filter
from synth_ai.filter.options import options_from_config

CI = settings(max_examples=100, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SOAK = settings(max_examples=4000, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

SCHEMA = (
    "CREATE TABLE session_traces (session_id, created_at, metadata)",
    "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id, message_type, content, timestamp)",
    "CREATE TABLE outcome_rewards (id INTEGER PRIMARY KEY, session_id, total_reward, achievements_count)",
)

TEXT = st.one_of(st.text(max_size=10), st.sampled_from(["", "train", "test", "m1", "../../x"]))
INT64 = st.integers(-(2**63), 2**63 - 1)  # what SQLite stores as INTEGER
CELL = st.one_of(st.none(), INT64, st.floats(), TEXT, st.binary(max_size=8))
CREATED = st.one_of(CELL, st.datetimes().map(str), st.datetimes().map(lambda d: d.isoformat() + "Z"),
                    st.floats(-1e12, 1e12), st.sampled_from(["2026-01-31T09:00:00", "9999-99-99", "1e400"]))
JSONISH = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), TEXT),
                       lambda inner: st.one_of(st.lists(inner, max_size=3),
                                               st.dictionaries(TEXT, inner, max_size=3)), max_leaves=6)
METADATA = st.one_of(
    st.fixed_dictionaries({}, optional={
        "task_split": st.one_of(TEXT, JSONISH), "task_id": st.one_of(TEXT, st.integers()), "model": TEXT,
        "status": st.sampled_from(["ok", "failed", "TIMEOUT", ""]), "error": JSONISH, "timed_out": JSONISH,
        "official_score": st.one_of(st.floats(), st.integers(), TEXT), "prompt": JSONISH, "completion": JSONISH,
        "judge_scores": st.one_of(st.dictionaries(st.sampled_from(["j1", "j2"]), st.one_of(st.floats(), TEXT)),
                                  JSONISH),
        "seed": JSONISH, "env_name": JSONISH}).map(json.dumps),
    JSONISH.map(json.dumps), CELL)
PART = st.one_of(st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}),
                 st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries(
                     {"url": st.sampled_from(["data:image/png;base64,iVBORw0KGgo=", "https://x.invalid/a.png",
                                              "../../etc/passwd", ""])})}),
                 st.dictionaries(TEXT, TEXT, max_size=2))
CONTENT = st.one_of(
    TEXT, CELL, JSONISH.map(json.dumps),
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                           "content": st.one_of(TEXT, st.lists(PART, max_size=3), st.none())},
                          optional={"tool_calls": st.lists(st.one_of(
                              st.fixed_dictionaries({"id": TEXT, "type": st.just("function"), "function":
                                                     st.fixed_dictionaries({"name": TEXT, "arguments": TEXT})}),
                              JSONISH), max_size=2)}).map(json.dumps),
    st.lists(st.one_of(PART, st.fixed_dictionaries({"tool_name": TEXT, "args": JSONISH})), max_size=3).map(json.dumps),
    st.fixed_dictionaries({"json_payload": st.one_of(TEXT, JSONISH.map(json.dumps))}).map(json.dumps),
)
MESSAGE = st.tuples(st.sampled_from(["user", "assistant", "system", "policy_user_prompt", "policy_system_prompt",
                                     "tool_result", "other"]), CONTENT, st.one_of(st.none(), CREATED))
SESSION = st.fixed_dictionaries({
    "id": st.one_of(TEXT, INT64), "created_at": CREATED, "metadata": METADATA,
    "rewards": st.lists(st.tuples(st.one_of(st.floats(), INT64, TEXT, st.none()), CELL), max_size=2),
    "messages": st.lists(MESSAGE, max_size=5)})
NUMBER = st.one_of(st.integers(-5, 5), st.floats(-5, 5))
RULES = st.fixed_dictionaries({}, optional={
    "splits": st.lists(st.sampled_from(["train", "test", ""]), max_size=2),
    "task_ids": st.lists(st.sampled_from(["1", "a"]), max_size=2),
    "models": st.lists(st.sampled_from(["m1", ""]), max_size=2),
    "min_official_score": NUMBER, "max_official_score": NUMBER,
    "min_judge_scores": st.dictionaries(st.sampled_from(["j1", "j2"]), NUMBER, max_size=2),
    "max_judge_scores": st.dictionaries(st.sampled_from(["j1", "j2"]), NUMBER, max_size=2),
    "min_created_at": st.sampled_from(["2020-01-01T00:00:00Z", "1970-01-01", "2100-01-01T00:00:00+05:00"]),
    "max_created_at": st.sampled_from(["2030-01-01T00:00:00Z", "2026-01-31"]),
    "limit": st.integers(1, 5), "offset": st.integers(0, 3), "shuffle": st.just(True),
    "shuffle_seed": st.integers(-3, 3)})


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"


def _write_db(path: Path, sessions: list[dict[str, Any]]) -> None:
    conn = sqlite3.connect(path)
    with conn:
        for statement in SCHEMA:
            conn.execute(statement)
        for s in sessions:
            conn.execute("INSERT INTO session_traces VALUES (?, ?, ?)", (s["id"], s["created_at"], s["metadata"]))
            conn.executemany("INSERT INTO outcome_rewards (session_id, total_reward, achievements_count) "
                             "VALUES (?, ?, ?)", [(s["id"], r, a) for r, a in s["rewards"]])
            conn.executemany("INSERT INTO messages (session_id, message_type, content, timestamp) VALUES (?, ?, ?, ?)",
                             [(s["id"], t, c, ts) for t, c, ts in s["messages"]])
    conn.close()


def _run(isolated_home: Path, sessions: list[dict[str, Any]], rules: dict[str, Any]) -> None:
    case = isolated_home / "case"
    shutil.rmtree(case, ignore_errors=True)  # hypothesis reuses the test's folder for every example
    case.mkdir()
    db = case / "traces.db"
    _write_db(db, sessions)
    if "shuffle_seed" in rules:
        rules = {**rules, "shuffle": True}
    config = case / "filter.toml"
    config.write_text("[filter]\n" + f'db = {json.dumps(str(db))}\noutput = "{case}/out/train.jsonl"\n'
                      + "".join(f"{k} = {_toml(v)}\n" for k, v in rules.items()))
    try:
        loaded = load_config(config, "filter")
    except SynthError:
        return  # contradictory rules (min above max, ...): refused with a located error, the config fuzz covers it
    options = options_from_config(loaded, base_dir=case)
    out = case / "out" / "train.jsonl"
    try:
        report = run_filter(options)
    except SynthError:
        assert not out.exists()
        assert not (case / "out").exists() or not list((case / "out").iterdir())  # no temp file left behind
        return
    assert sorted(p.name for p in (case / "out").iterdir()) == ["train.jsonl"]
    written = validate_jsonl(out)
    assert written.ok, (written.render(), out.read_text()[:2000])
    assert written.summary.examples == report.examples_written >= 1
    if options.limit is not None:
        assert report.examples_written <= options.limit
    for line in out.read_text(encoding="utf-8").split("\n")[:-1]:  # JSONL: only "\n" ends a record
        record = json.loads(line)
        assert [m["role"] for m in record["messages"]] == ["user", "assistant"]


SESSIONS = st.lists(SESSION, max_size=6, unique_by=lambda s: str(s["id"]))
test_filter_never_crashes_and_writes_valid_sft = CI(given(sessions=SESSIONS, rules=RULES)(_run))
test_filter_never_crashes_and_writes_valid_sft_soak = pytest.mark.soak(
    SOAK(given(sessions=SESSIONS, rules=RULES)(_run)))
