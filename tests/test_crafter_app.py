"""The bundled crafter task app, served for real (uvicorn on a free port), against a scripted chat-completions server.

The scripted model (`taskapp_support.scripted_model`) is a real HTTP server whose replies are the test's input
(the policy); the task app is never mocked. Crafter worlds are seeded, so with the same replies a rollout is the
same every time.
"""

from __future__ import annotations

import base64
import io
import struct
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from taskapp_support import (
    ENV_KEY,
    completion,
    headers,
    scripted_model,
    stop,
    subprocess_env,
    synth_ai_command,
    tool_call,
    wait_for_health,
)

from conftest import free_port
from synth_ai.bundled_apps import APPS_DIR

pytest.importorskip("crafter")

CRAFTER_DIR = APPS_DIR / "crafter"
HEADERS = headers()


@contextmanager
def model_replying(replies: list[dict[str, Any]]) -> Iterator[tuple[str, Any]]:
    """A scripted model answering `replies` in order (the last one repeats). A reply is `{"actions": [...]}` (an
    `interact_many` tool call), `{"content": "..."}` (plain text) or `{"status": 500}` (an HTTP error)."""
    count = {"n": 0}

    def policy(body: dict[str, Any]) -> Any:
        reply = replies[min(count["n"], len(replies) - 1)]
        count["n"] += 1
        if "status" in reply:
            return reply["status"], "scripted failure"
        calls = [tool_call("interact_many", {"actions": reply["actions"]})] if "actions" in reply else None
        return completion(reply.get("content"), calls, model=body.get("model") or "scripted")

    with scripted_model(policy) as (base, model):
        yield base, model


@pytest.fixture
def app_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The crafter app under a real uvicorn server on a free port (this process, a background thread)."""
    from synth_ai.taskapp.discovery import AppChoice, load_task_app
    from synth_ai.taskapp.serving import running_in_background
    from synth_ai.taskapp.server import create_task_app

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    entry = load_task_app(AppChoice("grpo-crafter-task-app", CRAFTER_DIR / "task_app.py"))
    with running_in_background(create_task_app(entry.config_factory())) as url:
        yield url


def rollout(url: str, model_base: str, *, seed: int = 3, policy: dict[str, Any] | None = None,
            env_config: dict[str, Any] | None = None, ops: list[Any] | None = None,
            safety: dict[str, Any] | None = None, cid: str = "cid-1",
            record: dict[str, Any] | None = None) -> httpx.Response:
    body: dict[str, Any] = {
        "run_id": f"run-{seed}",
        "env": {"seed": seed, "config": SMALL_WORLD if env_config is None else env_config},
        "policy": {"policy_name": "crafter-react", "config": {
            "model": "scripted", "inference_url": f"{model_base}?cid={cid}", "max_turns": 3, **(policy or {})}},
        "ops": ops if ops is not None else [],
        "mode": "eval",
    }
    if safety is not None:
        body["safety"] = safety
    if record is not None:
        body["record"] = record
    return httpx.post(f"{url}/rollout", json=body, headers=HEADERS, timeout=60)


def png_size(data_url: str) -> tuple[int, int]:
    prefix = "data:image/png;base64,"
    assert data_url.startswith(prefix)
    png = base64.b64decode(data_url[len(prefix):], validate=True)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png[12:16] == b"IHDR"
    size = struct.unpack(">II", png[16:24])
    from PIL import Image  # a dependency of crafter: decode the pixels too

    with Image.open(io.BytesIO(png)) as image:
        image.load()
        assert image.size == size and image.mode == "RGB"
    return size


def user_message(request: dict[str, Any]) -> dict[str, Any]:
    [user] = [m for m in request["messages"] if m["role"] == "user"]
    return user


# World generation takes about a second at the default 64x64; most tests use a smaller world.
SMALL_WORLD = {"area": [32, 32]}
# Seed 3 (default 64x64 world): walking left three times and hitting `do` reaches a sapling, then a tree.
CHOP = ["move_left", "move_left", "move_left", "do", "do", "do", "do", "do"]


# ----- tests ------------------------------------------------------------------------------------------------------


def bodies(model: Any) -> list[dict[str, Any]]:
    return [r["body"] for r in model.requests]


def test_text_rollout_under_serve_with_alias(tmp_path: Path) -> None:
    """`synth-ai deploy crafter --runtime uvicorn` (= serve) finds the app by alias and runs a text rollout."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*synth_ai_command(), "deploy", "crafter", "--runtime", "uvicorn", "--port", str(port)],
        cwd=tmp_path, env=subprocess_env(ENVIRONMENT_API_KEY=ENV_KEY), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        wait_for_health(url, timeout=60, process=proc)
        with model_replying([{"actions": CHOP}, {"content": "I will chop: move_left, do, do, do"},
                             {"actions": ["noop"]}]) as (base, model):
            response = rollout(url, base, ops=["agent", "env"] * 3, env_config={})
    finally:
        stop(proc)
    assert response.status_code == 200, response.text
    doc = response.json()
    expected_url = f"{base}/chat/completions?cid=cid-1"
    assert [(r["path"], r["query"]) for r in model.requests] == [("/v1/chat/completions", {"cid": "cid-1"})] * 3

    [trajectory] = doc["trajectories"]
    steps = trajectory["steps"]
    assert len(steps) == 3 and trajectory["length"] == 3
    assert all(step["info"]["meta"]["inference_url"] == expected_url for step in steps)
    assert trajectory["inference_url"] == expected_url
    assert doc["pipeline_metadata"] == {"trace_correlation_id": "cid-1", "inference_url": expected_url}
    assert doc["trace_correlation_id"] == "cid-1"

    # Text mode: the user message is plain text with the game state; the tool offers crafter's actions.
    first = bodies(model)[0]
    content = user_message(first)["content"]
    assert isinstance(content, str) and content.startswith("=== CRAFTER GAME STATE ===")
    for part in ("Vitals: health 9/9", "Inventory: empty", "Achievements: none", "Nearby:", "Local map"):
        assert part in content
    import crafter

    [tool] = first["tools"]
    assert tool["function"]["name"] == "interact_many"
    assert tool["function"]["parameters"]["properties"]["actions"]["items"]["enum"] == list(
        crafter.Env(seed=0).action_names)

    # Rewards: achievements unlocked for the first time in each turn; outcome = all achievements.
    assert steps[0]["tool_calls"] == [{"tool_name": "interact_many", "arguments": {"actions": CHOP}}]
    assert steps[0]["info"]["achievements_unlocked"] == ["collect_sapling"] and steps[0]["reward"] == 1.0
    assert steps[1]["tool_calls"][0]["parsed_from"] == "content"  # no tool call: actions read from the text
    assert steps[1]["info"]["actions"] == ["move_left", "do", "do", "do"]
    assert steps[1]["info"]["achievements_unlocked"] == ["collect_wood"] and steps[1]["reward"] == 1.0
    assert steps[2]["reward"] == 0.0 and steps[2]["truncated"] is True
    assert [s["reward"] for s in steps] == [len(s["info"]["achievements_unlocked"]) for s in steps]
    metrics = doc["metrics"]
    assert metrics["outcome_score"] == 2.0 and metrics["episode_returns"] == [2.0] and metrics["num_steps"] == 3
    assert metrics["details"]["achievements"] == ["collect_sapling", "collect_wood"]
    assert "Inventory: sapling: 1, wood: 1" in user_message(bodies(model)[2])["content"]
    assert doc["ops_executed"] == 6 and doc["aborted"] is False

    from synth_ai.taskapp.contracts import RolloutResponse, rl_response_problems

    RolloutResponse.model_validate(doc)
    assert rl_response_problems(doc) == []


def test_vision_rollout_sends_png_frames(app_url: str) -> None:
    with model_replying([{"actions": ["move_left", "do"]}]) as (base, model):
        response = rollout(app_url, base, policy={"use_vision": True, "max_turns": 2},
                           record={"return_trace": True})
    assert response.status_code == 200, response.text
    assert len(model.requests) == 2
    for request in bodies(model):
        content = user_message(request)["content"]
        assert isinstance(content, list)
        assert [p["type"] for p in content] == ["text", "image_url"]  # max_images_per_message defaults to 1
        assert content[0]["text"].startswith("=== CRAFTER GAME STATE ===")
        assert png_size(content[1]["image_url"]["url"]) == (64, 64)
    steps = response.json()["trajectories"][0]["steps"]
    assert png_size(steps[0]["obs"]["observation_image_data_url"]) == (64, 64)
    assert steps[0]["info"]["meta"]["inference_request"]["images"] == 1
    trace = response.json()["trace"]  # one LM call and one achievement-delta reward per turn
    assert trace["lm_calls"] == 2 and trace["decision_rewards"] == [s["reward"] for s in steps]


def test_image_only_mode_and_several_images(app_url: str) -> None:
    """image_only_mode sends no text part; max_images_per_message keeps the frames of the previous turn's
    actions (newest last); image_size sets the frame size."""
    with model_replying([{"actions": ["move_left", "move_up"]}]) as (base, model):
        response = rollout(app_url, base, env_config={**SMALL_WORLD, "image_size": [80, 48]},
                           policy={"image_only_mode": True, "max_images_per_message": 3, "max_turns": 2})
    assert response.status_code == 200, response.text
    first, second = (user_message(r)["content"] for r in bodies(model))
    assert [p["type"] for p in first] == ["image_url"]
    assert [p["type"] for p in second] == ["image_url", "image_url"]  # one frame per action of turn 1
    for part in (*first, *second):
        assert png_size(part["image_url"]["url"]) == (80, 48)
    assert second[0]["image_url"]["url"] != second[1]["image_url"]["url"]
    # The system prompt still explains the game and the tool.
    assert "interact_many" in bodies(model)[0]["messages"][0]["content"]


def test_rollouts_are_deterministic_by_seed(app_url: str) -> None:
    def texts(seed: int) -> list[str]:
        with model_replying([{"actions": CHOP}]) as (base, model):
            response = rollout(app_url, base, seed=seed, policy={"max_turns": 2})
        assert response.status_code == 200, response.text
        steps = response.json()["trajectories"][0]["steps"]
        return [s["obs"]["text"] for s in steps] + [str(s["reward"]) for s in steps]

    first = texts(7)
    assert texts(7) == first
    assert texts(8) != first


def test_limits_ops_and_safety(app_url: str) -> None:
    with model_replying([{"actions": ["noop"]}]) as (base, model):
        by_ops = rollout(app_url, base, ops=["agent", "env"], policy={"max_turns": 5}).json()
        by_safety = rollout(app_url, base, safety={"max_ops": 3, "max_time_s": 60}, policy={"max_turns": 5}).json()
        bad_ops = rollout(app_url, base, ops=["agent", "dance"])
    assert by_ops["metrics"]["num_steps"] == 1 and by_ops["aborted"] is False
    assert by_safety["metrics"]["num_steps"] == 1 and by_safety["aborted"] is True
    assert by_safety["metrics"]["details"]["stop_reason"] == "max_ops"
    assert by_safety["trajectories"][0]["steps"][-1]["truncated"] is True
    assert bad_ops.status_code == 400 and "ops[1]" in bad_ops.text


def test_invalid_actions_and_model_failures(app_url: str) -> None:
    with model_replying([{"actions": ["fly", "left", "do"]}]) as (base, model):
        doc = rollout(app_url, base, policy={"max_turns": 1}).json()
    info = doc["trajectories"][0]["steps"][0]["info"]
    assert info["actions"] == ["move_left", "do"] and info["invalid_actions"] == ["fly"]

    with model_replying([{"status": 500}]) as (base, model):
        failed = rollout(app_url, base)
    assert failed.status_code == 502
    assert failed.json()["detail"]["error"]["code"] == "inference_http_error"

    missing = httpx.post(f"{app_url}/rollout", headers=HEADERS, timeout=30, json={
        "run_id": "r", "env": {"seed": 1}, "policy": {"config": {}}, "ops": [], "mode": "rl"})
    assert missing.status_code == 400
    assert missing.json()["detail"]["error"]["code"] == "missing_inference_url"

    for policy, env_config in (({"timeout_s": "soon"}, None), ({}, {"area": [100_000, 100_000]})):
        bad = rollout(app_url, "http://127.0.0.1:9/v1", policy=policy, env_config=env_config)
        assert bad.status_code == 400, bad.text
        assert bad.json()["detail"]["error"]["code"] == "invalid_rollout_request"


def test_task_info(app_url: str) -> None:
    taskset = httpx.get(f"{app_url}/task_info", headers=HEADERS).json()["taskset"]
    assert taskset["id"] == "crafter_classic_procedural" and taskset["seed_range"] == [0, 2**31 - 1]
    one = httpx.get(f"{app_url}/task_info", params={"seed": 5}, headers=HEADERS).json()
    assert one["environment"] == "crafter" and one["dataset"]["seed"] == 5
    assert one["action_space"]["size"] == 17
    many = httpx.get(f"{app_url}/task_info", params=[("seed", 1), ("seed", 2)], headers=HEADERS).json()
    assert [i["dataset"]["seed"] for i in many] == [1, 2]
    assert httpx.get(f"{app_url}/", timeout=5).json() == {"status": "ok", "service": "grpo-crafter-task-app"}


def test_tracing_records_achievement_rewards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    from synth_ai.taskapp.discovery import AppChoice, load_task_app
    from synth_ai.taskapp.serving import running_in_background
    from synth_ai.taskapp.server import create_task_app

    db = tmp_path / "traces.db"
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.setenv("TASKAPP_TRACING_ENABLED", "1")
    monkeypatch.setenv("TASKAPP_TRACE_DB_PATH", str(db))
    entry = load_task_app(AppChoice("grpo-crafter-task-app", CRAFTER_DIR / "task_app.py"))
    with running_in_background(create_task_app(entry.config_factory())) as url:
        with model_replying([{"actions": CHOP}]) as (base, _model):
            response = rollout(url, base, env_config={}, policy={"max_turns": 1})
    assert response.status_code == 200, response.text
    with sqlite3.connect(db) as conn:
        events = conn.execute("SELECT event_type FROM events ORDER BY id").fetchall()
        rewards = conn.execute("SELECT reward_value, reward_type, source FROM event_rewards").fetchall()
        outcome = conn.execute("SELECT total_reward, achievements_count, total_steps FROM outcome_rewards").fetchall()
    assert events == [("cais",), ("environment",)]
    assert rewards == [(1.0, "achievement_delta", "environment")]  # collect_sapling
    assert outcome == [(1, 1, 1)]


def test_decision_records_for_step_rewards(app_url: str) -> None:
    """With `policy.config.step_rewards` (decision_stepwise, as the RL trainer forwards it) every step carries the
    reference's decision record; the trainer's unique / absolute step rewards read it. Without it: no record."""
    from synth_ai.backend.trainers.rl.step_rewards import StepRewardSettings, step_rewards

    replies = [{"actions": CHOP}, {"actions": ["move_left"] + ["do"] * 7}, {"actions": ["do"] * 8}]
    asked = {"step_rewards": {"enabled": True, "mode": "decision_stepwise"}}
    with model_replying(replies) as (base, _model):
        doc = rollout(app_url, base, env_config={}, policy=asked).json()
    records = [s["info"]["meta"]["decision_rewards"] for s in doc["trajectories"][0]["steps"]]
    assert [(r["turn"], r["unique_delta"], r["ach_delta"]) for r in records] == [(0, 1, 1), (1, 1, 2), (2, 0, 0)]
    assert records[1]["all"] == ["collect_sapling", "collect_wood"] and records[1]["unique"] == ["collect_wood"]
    assert step_rewards(doc, StepRewardSettings(True, "decision_stepwise", "unique")) == [1.0, 1.0, 0.0]
    assert step_rewards(doc, StepRewardSettings(True, "decision_stepwise", "absolute")) == [1.0, 2.0, 0.0]
    with model_replying(replies) as (base, _model):
        plain = rollout(app_url, base, policy={"max_turns": 1}).json()
    assert all("decision_rewards" not in s["info"]["meta"] for s in plain["trajectories"][0]["steps"])
