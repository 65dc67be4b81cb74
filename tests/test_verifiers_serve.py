"""`synth-ai serve verifiers:<target>` as a real process: its routes, rollouts whose model calls go to a scripted
OpenAI-compatible server (a stand-in for the model), multi-turn with an MCP tool, tracing to SQLite, and
`task-app validate` / `task-app info` on a verifiers id."""

from __future__ import annotations

import json
import sqlite3

import httpx
from taskapp_support import completion, headers, rollout_body, scripted_model, tool_call
from verifiers_support import (
    CALC_ENV,
    ENVS,
    QA_ENV,
    ROLLOUT_TIMEOUT_S,
    env_args_restored,
    served,
)

__all__ = ["env_args_restored"]  # the autouse fixture, used by being here


def arithmetic(body: dict) -> dict:
    """Answers qa_env's questions ("What is 2 + 2?") correctly and briefly."""
    question = next(m["content"] for m in body["messages"] if m["role"] == "user")
    a, op, b = question.removeprefix("What is ").rstrip("?").split()
    value = {"+": int(a) + int(b), "-": int(a) - int(b), "/": int(a) // int(b)}[op]
    return completion(f"The answer is {value}.")


def calculator_user(body: dict) -> dict:
    """calc_env's model: first asks for `calc_add` with the numbers of the prompt, then states the tool's result."""
    tool_results = [m for m in body["messages"] if m["role"] == "tool"]
    if tool_results:
        return completion(f"The sum is {tool_results[-1]['content']}.")
    words = next(m["content"] for m in body["messages"] if m["role"] == "user").split()
    a, b = int(words[words.index("and") - 1]), int(words[words.index("and") + 1].rstrip(","))
    return completion(tool_calls=[tool_call("calc_add", {"a": a, "b": b}, call_id="call_add")])


def test_serve_qa_env_routes_rollout_and_trace(tmp_path):
    traces = tmp_path / "traces"
    with scripted_model(arithmetic) as (model_url, model), served(QA_ENV, tmp_path, "--trace", str(traces)) as (
            base, _):
        assert httpx.get(f"{base}/health", headers=headers()).json()["healthy"] is True
        info = httpx.get(f"{base}/info", headers=headers()).json()
        assert info["service"]["task"]["id"] == "qa_env"
        assert info["dataset"]["sizes"] == {"train": 4, "eval": 2}

        taskset = httpx.get(f"{base}/task_info", headers=headers()).json()["taskset"]
        assert taskset["sizes"] == {"train": 4, "eval": 2}
        assert sorted(taskset["rewards"]) == ["brief", "correct"]
        assert taskset["uses_tools"] is False and taskset["source"] == "verifiers"

        train = httpx.post(f"{base}/rollout", json=rollout_body(f"{model_url}?cid=cid-qa-1", seed=1, mode="rl"),
                           headers=headers(), timeout=ROLLOUT_TIMEOUT_S)
        assert train.status_code == 200, train.text
        doc = train.json()
        assert doc["metrics"]["details"]["reward_components"] == {"correct": 1.0, "brief": 1.0}
        assert doc["metrics"]["details"]["reward_weights"] == {"correct": 1.0, "brief": 0.5}
        assert doc["metrics"]["mean_return"] == 1.5
        [step] = doc["trajectories"][0]["steps"]
        assert step["obs"]["messages"][-1] == {"role": "user", "content": "What is 3 + 5?"}
        assert step["info"]["reply"]["content"] == "The answer is 8."
        assert step["done"] is True and step["reward"] == 1.5
        assert doc["trace_correlation_id"] == "cid-qa-1"
        session = doc["trace"]["session_id"]
        assert doc["trace"]["lm_calls"] == 1

        # An eval-mode seed reads the test rows (qa_env's `split` field set to "test").
        evaluated = httpx.post(f"{base}/rollout", json=rollout_body(f"{model_url}?cid=cid-qa-2", seed=1, mode="eval",
                                                                    split="eval"),
                               headers=headers(), timeout=ROLLOUT_TIMEOUT_S)
        assert evaluated.status_code == 200, evaluated.text
        assert evaluated.json()["trajectories"][0]["steps"][0]["info"]["reply"]["content"] == "The answer is 5."
    assert [r["query"].get("cid") for r in model.requests] == ["cid-qa-1", "cid-qa-2"]

    with sqlite3.connect(traces / "synth_ai.db") as conn:
        sessions = [row[0] for row in conn.execute("SELECT session_id FROM session_traces")]
        assert session in sessions and len(sessions) == 2
        lm_events = conn.execute("SELECT COUNT(*) FROM events WHERE session_id = ? AND event_type = 'cais'",
                                 (session,)).fetchone()[0]
        assert lm_events == 1
        contents = [row[0] for row in conn.execute("SELECT content FROM messages WHERE session_id = ?", (session,))]
        assert any("What is 3 + 5?" in str(c) for c in contents)
        assert any("The answer is 8." in str(c) for c in contents)


def test_calc_env_tool_call_runs_two_turns_through_the_relay(tmp_path):
    with scripted_model(calculator_user) as (model_url, model), served(CALC_ENV, tmp_path) as (base, _):
        taskset = httpx.get(f"{base}/task_info", headers=headers()).json()["taskset"]
        assert taskset["uses_tools"] is True and taskset["sizes"] == {"train": 3, "eval": 3}
        response = httpx.post(f"{base}/rollout", json=rollout_body(f"{model_url}?cid=cid-calc-1", seed=1),
                              headers=headers(), timeout=ROLLOUT_TIMEOUT_S)
    assert response.status_code == 200, response.text
    doc = response.json()
    first, second = doc["trajectories"][0]["steps"]
    assert [call["function"]["name"] for call in first["tool_calls"]] == ["calc_add"]
    assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {"a": 4, "b": 5}
    tool_messages = [m for m in second["obs"]["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1 and "9" in str(tool_messages[0]["content"])
    assert second["info"]["reply"]["content"] == "The sum is 9."
    details = doc["metrics"]["details"]
    assert details["reward_components"] == {"correct": 1.0, "used_tool": 1.0}
    assert doc["metrics"]["mean_return"] == 1.0 * 1.0 + 0.25 * 1.0 and second["reward"] == 1.25
    assert len(model.requests) == 2
    assert all(r["query"].get("cid") == "cid-calc-1" for r in model.requests)
    assert any(t["function"]["name"] == "calc_add" for t in model.requests[0]["body"].get("tools", []))


def test_task_app_validate_runs_a_real_rollout(cli, monkeypatch):
    with scripted_model(arithmetic) as (model_url, model):
        result = cli("task-app", "validate", QA_ENV, "--inference-url", model_url, "--model", "scripted-model",
                     "--min-instances", "4", "--rollout-timeout", str(ROLLOUT_TIMEOUT_S), "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    checks = {c["name"]: c for c in result.json()["checks"]}
    assert checks["rollout"]["ok"] and "rollout ran: 1 step(s), mean return 1.5" in checks["rollout"]["message"]
    assert checks["task_instances"]["ok"]
    assert len(model.requests) == 1 and model.requests[0]["query"].get("cid")


def test_task_app_info_describes_the_environment(cli):
    described = cli("task-app", "info", QA_ENV, "--env-args", '{"limit": 3}', "--json")
    assert described.exit_code == 0, described.stderr
    taskset = described.json()["taskset"]
    assert taskset["target"] == str(ENVS / "qa_env.py") and taskset["task_type"] == "QATask"
    assert taskset["sizes"] == {"train": 3, "eval": 2} and taskset["env_args"] == {"limit": 3}

    instance = cli("task-app", "info", QA_ENV, "--seed", "2")
    assert instance.exit_code == 0, instance.stderr
    assert "verifiers environment" in instance.stdout and "What is 10 - 3?" in instance.stdout
