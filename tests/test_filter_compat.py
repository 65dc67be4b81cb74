"""Compatibility with synth-ai 0.2.17's `filter` (when its virtualenv from `bench/reference_env.py` is present):
the reference reads a database written by our tracing store and writes the same file we do, and we read a
database written by the reference's own SessionTracer and write the same file it does."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest
from conftest import REPO_ROOT, free_port
from filter_support import add_session, filter_config, read_jsonl
from reference_support import REF_CLI, REF_PYTHON, REF_VENV
from taskapp_support import (
    ENV_KEY,
    completion,
    headers,
    scripted_model,
    stop,
    subprocess_env,
    tool_call,
    wait_for_health,
)

from synth_ai.tracing import TraceStore

WRITER = REPO_ROOT / "tests" / "data" / "filter" / "reference_tracer_writer.py"
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}

pytestmark = [pytest.mark.slow, pytest.mark.reference_venv]


def _reference_filter(config: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(REF_CLI), "filter", "--config", str(config)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def _both(cli, tmp_path: Path, db: Path, name: str, **keys) -> tuple[Path, Path]:
    ours, theirs = tmp_path / f"{name}_ours.jsonl", tmp_path / f"{name}_ref.jsonl"
    result = cli("filter", "--config", str(filter_config(tmp_path / f"{name}_ours.toml", db, ours, **keys)))
    assert result.exit_code == 0, result.stdout + result.stderr
    ref = _reference_filter(filter_config(tmp_path / f"{name}_ref.toml", db, theirs, **keys), tmp_path)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert f"Wrote {len(read_jsonl(theirs))} examples" in ref.stdout
    return ours, theirs


def test_reference_filter_reads_our_database(cli, tmp_path):
    db = tmp_path / "ours.db"
    day = "2026-02-{:02d}T10:00:00.250000+00:00".format
    with TraceStore(db) as store:
        add_session(store, "a", task_split="train", task_id="t1", model="m1", seed=1, env_name="math",
                    policy_name="p", judge_scores={"q": 0.8}, reward=1.0, created_at=day(1))
        add_session(store, "b", task_split="train", task_id="t2", model="m1", judge_scores={"q": 0.1},
                    reward=0.0, created_at=day(2))
        add_session(store, "c", turns=[("one", "uno"), ("two", "dos"), ("three", None)], task_split="train",
                    task_id="t3", model="m2", reward=1.0, created_at=day(3))
        add_session(store, "d", turns=[([{"type": "text", "text": "see"}, IMAGE], "a cow")], task_split="test",
                    task_id="t4", model="m2", reward=1.0, created_at=day(4))
        add_session(store, "e", turns=[], prompt="p?", completion="c!", task_split="train", reward=1.0,
                    created_at=day(5))
    ours, theirs = _both(cli, tmp_path, db, "scored", min_official_score=0.5)
    assert ours.read_bytes() == theirs.read_bytes()
    assert [r["metadata"]["session_id"] for r in read_jsonl(ours)] == ["a", "c", "c", "c", "d", "e"]

    ours, theirs = _both(cli, tmp_path, db, "rules", splits=["train"], models=["m1"], min_official_score=0,
                         min_judge_scores={"q": 0.5}, min_created_at="2026-02-01T00:00:00Z", limit=5)
    assert ours.read_bytes() == theirs.read_bytes()
    assert [r["metadata"]["session_id"] for r in read_jsonl(ours)] == ["a"]


def test_we_read_a_database_the_reference_tracer_wrote(cli, tmp_path):
    db = tmp_path / "ref.db"
    written = subprocess.run([str(REF_PYTHON), str(WRITER), str(db)], capture_output=True, text=True, timeout=300)
    assert written.returncode == 0, written.stdout + written.stderr
    ours, theirs = _both(cli, tmp_path, db, "scored", min_official_score=0)
    assert ours.read_bytes() == theirs.read_bytes()
    records = read_jsonl(ours)
    assert [r["metadata"]["session_id"] for r in records] == ["r1", "r2", "r2", "r3"]
    assert records[3]["messages"][0]["content"][1] == IMAGE  # the image survives

    # without a score rule 0.2.17 leaves total_reward out; we always fill it from outcome_rewards
    ours, theirs = _both(cli, tmp_path, db, "all")
    mine, reference = read_jsonl(ours), read_jsonl(theirs)
    assert [r["messages"] for r in mine] == [r["messages"] for r in reference]
    strip = ("total_reward", "achievements_count")
    assert [{k: v for k, v in r["metadata"].items() if k not in strip} for r in mine] == \
        [{k: v for k, v in r["metadata"].items() if k not in strip} for r in reference]
    assert [r["metadata"]["total_reward"] for r in mine] == [1, 0, 0, 1, None]
    assert mine[-1]["messages"] == [{"role": "user", "content": "p?"}, {"role": "assistant", "content": "c!"}]
    assert json.loads(ours.read_text().splitlines()[0])["metadata"]["created_at"].endswith("+00:00")


def test_we_read_the_reference_crafter_apps_trace_db(cli, tmp_path):
    """0.2.17's crafter app under its own `serve --trace-db` stores the session and its outcome reward but no
    messages (its known gap): we read its database, count the session as giving no example, and agree with 0.2.17's
    filter that nothing matched."""
    site = sorted(REF_VENV.glob("lib/python3*/site-packages"))[0]
    db = tmp_path / "tr" / "db.db"
    port = free_port()
    env = subprocess_env(SYNTH_TASK_APP_SEARCH_PATH=str(site / "examples" / "task_apps" / "crafter"),
                         ENVIRONMENT_API_KEY=ENV_KEY, GROQ_API_KEY="dummy", HOME=str(tmp_path))
    env.pop("SYNTH_API_KEY", None)
    process = subprocess.Popen(
        [str(REF_CLI), "serve", "grpo-crafter-task-app", "--host", "127.0.0.1", "--port", str(port),
         "--trace", str(tmp_path / "tr"), "--trace-db", str(db)],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    reply = completion(None, [tool_call("interact_many", {"actions": ["move_left", "do"]})], model="scripted")
    try:
        wait_for_health(base, timeout=180, process=process)
        with scripted_model(lambda body: reply) as (model_url, _):
            body = {"run_id": "run-1", "env": {"env_name": "crafter", "seed": 3, "config": {}},
                    "policy": {"policy_name": "crafter-react",
                               "config": {"model": "scripted", "inference_url": model_url}},
                    "ops": ["agent", "env"], "mode": "eval"}
            response = httpx.post(f"{base}/rollout", json=body, headers=headers(), timeout=300)
    finally:
        stop(process)
    assert response.status_code == 200, response.text
    assert os.path.exists(db)
    config = filter_config(tmp_path / "f.toml", db, tmp_path / "out.jsonl", min_official_score=0)
    result = cli("--json", "filter", "--config", str(config))
    assert result.exit_code == 12, result.stdout
    details = result.json()["error"]["details"]
    assert details["sessions"] == {"total": 1, "read": 1, "kept": 0,
                                   "dropped": {"errored": 0, "official_score": 0, "no_examples": 1}}
    ref = _reference_filter(config, tmp_path)
    assert ref.returncode == 1 and "No sessions matched the provided filters" in ref.stderr
    assert not (tmp_path / "out.jsonl").exists()
