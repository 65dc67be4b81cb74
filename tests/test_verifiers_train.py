"""A verifiers environment (tests/verifiers_envs/qa_env.py) through eval, filter and RL, with the tiny local Qwen3
served by the embedded backend: `synth-ai eval` in-process (`app_id = "verifiers:<path>"`) and against `synth-ai
serve verifiers:<path>` at `--url`, each reward function's score reported and stored; `synth-ai filter` turning
those traces into SFT JSONL; a short GSPO job on the embedded backend against the served environment, trained on
the tokens the policy sampled through the environment's relay.

The first rollout in a process syncs verifiers' chat program's dependencies with uv (about 10 s, cached after)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from backend_support import TINY_TEXT, build_tiny_models, link_tiny
from conftest import REPO_ROOT, free_port, run_cli
from eval_support import by_seed
from filter_support import filter_config, read_jsonl
from taskapp_support import ENV_KEY, stop, subprocess_env, synth_ai_command, wait_for_health

pytestmark = pytest.mark.slow
pytest.importorskip("verifiers")
pytest.importorskip("torch")

QA_ENV = REPO_ROOT / "tests" / "verifiers_envs" / "qa_env.py"
APP_ID = f"verifiers:{QA_ENV}"
TEST_QUESTIONS = {"What is 1 + 1?", "What is 9 - 4?"}  # the env's test split: what eval's seeds are asked
RL_CONFIG = REPO_ROOT / "examples" / "configs" / "rl_tiny_local.toml"


def _eval_config(path: Path) -> Path:
    lines = ["[eval]", f"app_id = {json.dumps(APP_ID)}", f"model = {json.dumps(TINY_TEXT)}", 'seeds = "0-1"',
             'split = "test"', "concurrency = 2", "", "[eval.policy_config]", "max_tokens = 16", "temperature = 1.0",
             "timeout_s = 300"]
    path.write_text("\n".join(lines) + "\n")
    return path


def _rl_config(path: Path, task_url: str) -> Path:
    """The shipped tiny RL config on the verifiers environment: 2 iterations of 2 seeds x 4 rollouts, no
    evaluation."""
    text = RL_CONFIG.read_text()
    for old, new in (("iterations_per_epoch = 16", "iterations_per_epoch = 2"), ("batch_size = 4", "batch_size = 2"),
                     ("group_size = 8", "group_size = 4"), ('task_url = "http://127.0.0.1:8102"',
                                                            f"task_url = {json.dumps(task_url)}"),
                     ('env_name = "color_quiz"', 'env_name = "qa_env"'), ("[rollout.env_config]\nthings = 1\n", ""),
                     ("max_tokens = 12", "max_tokens = 16")):
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text[:text.index("[evaluation]")])
    return path


def _served(cwd: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen([*synth_ai_command(), "serve", APP_ID, "--host", "127.0.0.1", "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                               env=subprocess_env(), cwd=cwd)
    url = f"http://127.0.0.1:{port}"
    wait_for_health(url, process=process, timeout=180)  # importing verifiers is slow on a busy machine
    return process, url


def _check_components(doc: dict) -> None:
    """Each seed's `correct` and `brief` scores, their means over the seeds, and the weighted total as the outcome."""
    results = doc["results"]
    assert [r["status"] for r in results] == ["ok", "ok"], results
    for r in results:
        parts = r["reward_components"]
        assert set(parts) == {"correct", "brief"} and all(v in (0.0, 1.0) for v in parts.values())
        assert r["outcome_score"] == pytest.approx(parts["correct"] + 0.5 * parts["brief"])
    means = doc["summary"]["reward_components"]
    for name in ("correct", "brief"):
        assert means[name] == {"mean": pytest.approx(sum(r["reward_components"][name] for r in results) / 2),
                               "scored": 2}


def test_eval_in_process_and_served_then_filter_to_sft(monkeypatch: pytest.MonkeyPatch, isolated_home: Path,
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    from synth_ai.env.paths import data_dir

    monkeypatch.setenv("SYNTH_AI_BACKEND_PORT", str(free_port()))
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    link_tiny(data_dir(), build_tiny_models(tmp_path_factory.getbasetemp() / "ml-core-data", (TINY_TEXT,)))
    config = _eval_config(isolated_home / "eval.toml")
    db = isolated_home / "traces.db"
    serve = None
    try:
        local = run_cli("--json", "eval", "--config", str(config), "--trace-db", str(db))
        assert local.exit_code == 0, local.stdout + local.stderr
        doc = local.json()
        assert doc["app_id"] == APP_ID and doc["inference"] == "embedded backend"
        _check_components(doc)
        # the rendered report names each function, per seed and as a mean
        shown = run_cli("eval", "--config", str(config), "--seeds", "0", "--trace-db", "none")
        assert shown.exit_code == 0, shown.stdout + shown.stderr
        assert "reward.correct=" in shown.stdout + shown.stderr and "[reward brief] mean:" in shown.stdout

        serve, url = _served(isolated_home)
        remote = run_cli("--json", "eval", "--config", str(config), "--url", url, "--seeds", "0-1",
                         "--trace-db", str(db))
        assert remote.exit_code == 0, remote.stdout + remote.stderr
        assert remote.json()["task_app"] == url
        _check_components(remote.json())

        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT COUNT(*) FROM session_traces").fetchone()[0] == 4
            models = [r[0] for r in conn.execute("SELECT model_name FROM events WHERE event_type = 'cais'")]
        assert models == [TINY_TEXT] * 4  # one model call per rollout, recorded through the relay
        stored = by_seed(db)
        for seed, session in stored.items():
            meta = session["metadata"]
            assert set(meta["reward_components"]) == {"correct", "brief"}
            assert meta["reward_weights"] == {"correct": 1.0, "brief": 0.5}
            assert meta["prompt"] in TEST_QUESTIONS and session["messages"][-1] == "assistant", (seed, session)
    finally:
        if serve is not None:
            stop(serve)
        assert run_cli("backend", "stop").exit_code == 0

    out = isolated_home / "sft.jsonl"
    filtered = run_cli("--json", "filter", "--config", str(filter_config(isolated_home / "filter.toml", db, out)))
    assert filtered.exit_code == 0, filtered.stdout + filtered.stderr
    records = read_jsonl(out)
    assert len(records) == 4
    for record in records:
        user, assistant = record["messages"][-2:]
        assert user["role"] == "user" and user["content"] in TEST_QUESTIONS
        assert assistant["role"] == "assistant" and isinstance(assistant["content"], str)


def test_gspo_on_the_embedded_backend_against_the_served_environment(monkeypatch: pytest.MonkeyPatch,
                                                                      isolated_home: Path,
                                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    from synth_ai.env.paths import data_dir

    monkeypatch.setenv("SYNTH_AI_BACKEND_PORT", str(free_port()))
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    link_tiny(data_dir(), build_tiny_models(tmp_path_factory.getbasetemp() / "ml-core-data", (TINY_TEXT,)))
    serve, url = _served(isolated_home)
    try:
        result = run_cli("--json", "train", "--type", "rl", "--config", str(_rl_config(isolated_home / "rl.toml",
                         url)), "--poll-interval", "0.5")
        assert result.exit_code == 0, result.stdout + result.stderr
        doc = result.json()
        events = run_cli("--json", "jobs", "events", doc["job_id"])
        assert events.exit_code == 0, events.stdout + events.stderr
    finally:
        output = stop(serve)
        assert run_cli("backend", "stop").exit_code == 0
    assert doc["status"] == "succeeded" and doc["fine_tuned_model"].startswith("rl:"), doc
    assert "reward.mean" in doc["last_metrics"], (doc, output)
    steps = [e for e in events.json()["events"] if e.get("type") == "rl.train.step"]
    assert len(steps) == 2, events.stdout
    # every rollout answered with its sampled tokens (found by the cid the relay kept: none is a `no_calls` error)
    for step in steps:
        data = step["data"]
        assert data["rollouts"] == 8 and data["errors"] == 0 and data["response_tokens_mean"] > 0, data
        assert isinstance(data["reward_mean"], float), data
    # a group whose rewards differ (some reply holds the answer's digit, some not) was trained on, with the trainer's
    # log-probs of those tokens matching the sampler's
    trained = [s["data"] for s in steps if s["data"]["samples"] > 0]
    assert trained, [s["data"] for s in steps]
    assert all(d["optimizer_steps"] >= 1 and d["mismatch_kl"] == pytest.approx(0.0, abs=1e-3) for d in trained)
