"""The bundled math-single-step app against a scripted OpenAI-compatible model server (real HTTP both ways)."""

from __future__ import annotations

import asyncio
import json

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

from synth_ai.taskapp import create_task_app, rl_response_problems


@pytest.fixture
def math_app(monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    entry = math_entry()
    module = __import__("sys").modules[entry.config_factory.__module__]
    with running_app(create_task_app(entry.config_factory())) as base:
        yield base, module


def _answer_for(module, split: str, seed: int) -> str:
    _, row = module.pick(split, seed)
    return module.expected_answer(row)


def test_correct_tool_call_scores_one_and_meets_rl_expectations(math_app):
    base, module = math_app
    expected = _answer_for(module, "train", 3)

    def policy(body):
        assert body["tools"][0]["function"]["name"] == "math_submit"
        assert body["messages"][-1]["role"] == "user"
        return completion(tool_calls=[tool_call("math_submit", {"answer": expected})])

    with scripted_model(policy) as (model_url, model):
        url = f"{model_url}?cid=trace-abc"
        response = httpx.post(f"{base}/rollout", json=rollout_body(url, seed=3, mode="rl"), headers=headers(),
                              timeout=30)
    assert response.status_code == 200, response.text
    doc = response.json()
    step = doc["trajectories"][0]["steps"][0]
    assert step["reward"] == 1.0 and step["done"] is True
    assert step["tool_calls"] == [{"tool_name": "math_submit", "arguments": {"answer": expected}}]
    assert step["info"]["correct"] is True and step["info"]["answer_source"] == "tool_call"
    assert doc["metrics"]["mean_return"] == 1.0 and doc["metrics"]["episode_returns"] == [1.0]
    # The trainer's ?cid= survives URL normalisation, reaches the model, and comes back.
    assert model.requests[0]["path"] == "/v1/chat/completions"
    assert model.requests[0]["query"] == {"cid": "trace-abc"}
    assert doc["pipeline_metadata"]["inference_url"].endswith("/v1/chat/completions?cid=trace-abc")
    assert step["info"]["meta"]["inference_url"] == doc["pipeline_metadata"]["inference_url"]
    assert doc["trace_correlation_id"] == "trace-abc"
    assert rl_response_problems(doc) == []


def test_wrong_answer_scores_zero(math_app):
    base, _ = math_app
    with scripted_model(lambda body: completion(tool_calls=[tool_call("math_submit", {"answer": "-99999"})])) \
            as (model_url, _model):
        doc = httpx.post(f"{base}/rollout", json=rollout_body(model_url, seed=1), headers=headers(),
                         timeout=30).json()
    step = doc["trajectories"][0]["steps"][0]
    assert step["reward"] == 0.0 and step["info"]["correct"] is False
    assert doc["metrics"]["mean_return"] == 0.0


def test_no_tool_call_graded_on_boxed_text(math_app):
    base, module = math_app
    expected = _answer_for(module, "test", 2)
    with scripted_model(lambda body: completion(content=f"So it is \\boxed{{{expected}}}.")) as (model_url, _):
        doc = httpx.post(f"{base}/rollout", json=rollout_body(model_url, seed=2, split="test"), headers=headers(),
                         timeout=30).json()
    step = doc["trajectories"][0]["steps"][0]
    assert step["reward"] == 1.0 and step["tool_calls"] == [] and step["info"]["answer_source"] == "text"
    assert doc["trajectories"][0]["env_id"].startswith("math_single_step:test:")


def test_qwen_style_tool_call_in_text_is_understood(math_app):
    base, module = math_app
    expected = _answer_for(module, "train", 0)
    call = json.dumps({"name": "math_submit", "arguments": {"answer": expected}})
    text = f"<tool_call>\n{call}\n</tool_call>"
    with scripted_model(lambda body: completion(content=text)) as (model_url, _):
        doc = httpx.post(f"{base}/rollout", json=rollout_body(model_url, seed=0), headers=headers(),
                         timeout=30).json()
    assert doc["trajectories"][0]["steps"][0]["reward"] == 1.0


@pytest.mark.parametrize("answer, status, code, fragment", [
    ((500, "model crashed"), 502, "inference_http_error", "HTTP 500: model crashed"),
    ((200, "this is not json"), 502, "inference_bad_response", "non-JSON"),
    ({"object": "error"}, 502, "inference_bad_response", "not a chat completion"),
])
def test_model_endpoint_failures_are_clear_rollout_errors(math_app, answer, status, code, fragment):
    base, _ = math_app
    with scripted_model(lambda body: answer) as (model_url, _):
        response = httpx.post(f"{base}/rollout", json=rollout_body(model_url), headers=headers(), timeout=30)
    assert response.status_code == status
    error = response.json()["detail"]["error"]
    assert error["code"] == code and fragment in error["message"]
    assert "/v1/chat/completions" in error["message"]


def test_unreachable_and_slow_model(math_app):
    base, _ = math_app
    dead = httpx.post(f"{base}/rollout", json=rollout_body("http://127.0.0.1:9/v1"), headers=headers(), timeout=30)
    assert dead.status_code == 502
    assert dead.json()["detail"]["error"]["code"] == "inference_unreachable"

    async def slow(body):
        await asyncio.sleep(1)
        return completion(content="late")

    with scripted_model(slow) as (model_url, _):
        response = httpx.post(f"{base}/rollout", json=rollout_body(model_url, timeout_s=0.3), headers=headers(),
                              timeout=30)
    assert response.status_code == 504
    assert response.json()["detail"]["error"]["code"] == "inference_timeout"


def test_missing_inference_url_is_400(math_app):
    base, _ = math_app
    body = rollout_body("http://x")
    del body["policy"]["config"]["inference_url"]
    response = httpx.post(f"{base}/rollout", json=body, headers=headers())
    assert response.status_code == 400
    assert response.json()["detail"]["error"]["code"] == "missing_inference_url"



def test_bad_seed_and_timeout_are_400_not_500(math_app):
    base, _ = math_app
    body = rollout_body("http://127.0.0.1:9/v1")
    body["env"] = {"seed": None, "config": {"split": "train", "seed": "__SEED__"}}
    text = json.dumps(body).replace('"__SEED__"', "1e999")  # JSON number that parses to infinity
    seed = httpx.post(f"{base}/rollout", content=text, headers={**headers(), "Content-Type": "application/json"})
    assert seed.status_code == 400 and seed.json()["detail"]["error"]["code"] == "invalid_seed"
    for bad in ("soon", None, -1, 0):
        response = httpx.post(f"{base}/rollout", json=rollout_body("http://127.0.0.1:9/v1", timeout_s=bad),
                              headers=headers())
        assert response.status_code == 400, (bad, response.text)
        assert response.json()["detail"]["error"]["code"] == "invalid_timeout"

def test_taskset_and_local_dataset_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    for split, rows in (("train", [{"problem": "1+1?", "solution": "\\boxed{2}"}] * 3),
                        ("test", [{"problem": "2+2?", "solution": "4", "answer": "4"}])):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("MATH_DATASET_LOCAL_DIR", str(tmp_path))
    entry = math_entry()
    with running_app(create_task_app(entry.config_factory())) as base:
        taskset = httpx.get(f"{base}/task_info", headers=headers()).json()["taskset"]
        assert taskset["sizes"] == {"train": 3, "test": 1} and taskset["sources"]["train"] == "local"
        inst = httpx.get(f"{base}/task_info", params={"seed": 4}, headers=headers()).json()
        assert inst["task_metadata"]["problem"] == "1+1?"
        with scripted_model(lambda body: completion(tool_calls=[tool_call("math_submit", {"answer": "4"})])) \
                as (model_url, _):
            doc = httpx.post(f"{base}/rollout", json=rollout_body(model_url, split="test"), headers=headers(),
                             timeout=30).json()
    assert doc["trajectories"][0]["steps"][0]["reward"] == 1.0


def test_bundled_dataset_sizes():
    module = __import__("sys").modules[math_entry().config_factory.__module__]
    rows_train, source = module.dataset("train")
    rows_test, _ = module.dataset("test")
    assert (len(rows_train), len(rows_test), source) == (40, 20, "bundled")
    assert all(module.extract_boxed(r["solution"]) for r in rows_train + rows_test)


@pytest.mark.parametrize("given, expected, match", [
    ("42", "\\boxed{42}", True), ("42.0", "42", True), ("\\frac{7}{8}", "\\dfrac{7}{8}", True),
    ("7/8", "\\frac{7}{8}", True), ("0.875", "\\frac78", True), ("x = 5", "5", True), ("$1,296$", "1296", True),
    ("-\\frac{1}{2}", "-0.5", True), ("12\\%", "12", True), ("41", "42", False), ("", "0", False),
    ("\\text{twelve}", "12", False),
])
def test_answer_normalisation(given, expected, match):
    module = __import__("sys").modules[math_entry().config_factory.__module__]
    assert module.answers_match(given, expected) is match
