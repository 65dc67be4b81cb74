"""A bundled task app whose policy is the embedded backend's own inference endpoint: the rollout's model calls
are authorised with the backend's key (never with a vendor key), end to end over real HTTP."""

from __future__ import annotations

import httpx
import pytest

from backend_support import TINY_TEXT, BackendProcess
from conftest import REPO_ROOT

ENV_KEY = "sk_env_embedded_inference_0123456789"


@pytest.fixture
def backend(shared_backend: BackendProcess) -> BackendProcess:
    """The worker's shared backend: these tests only call its inference endpoint."""
    return shared_backend


def test_math_rollout_against_embedded_inference(backend: BackendProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    from synth_ai.taskapp import create_task_app
    from taskapp_support import math_entry, rollout_body, running_app

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-vendor-key-must-not-reach-the-backend")
    inference_url = f"{backend.url}/api/inference/v1/chat/completions?cid=trace-embedded-1"
    body = rollout_body(inference_url, seed=1, max_tokens=16, temperature=0.0)
    body["policy"]["config"]["model"] = "synth-ai/tiny-qwen3"
    with running_app(create_task_app(math_entry().config_factory())) as app_url:
        response = httpx.post(f"{app_url}/rollout", json=body, headers={"X-API-Key": ENV_KEY}, timeout=120)
    assert response.status_code == 200, response.text
    doc = response.json()
    step = doc["trajectories"][0]["steps"][0]
    assert step["info"]["meta"]["inference_url"].startswith(f"{backend.url}/api/inference/")
    assert doc["pipeline_metadata"]["inference_url"].endswith("cid=trace-embedded-1")
    assert isinstance(step["reward"], (int, float))


def test_embedded_inference_refuses_calls_without_the_key(backend: BackendProcess) -> None:
    body = {"model": "synth-ai/tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    response = httpx.post(f"{backend.url}/api/inference/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 401


def test_the_tiny_model_as_an_rl_judge_gives_no_score_and_that_is_counted(backend: BackendProcess,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`[judge.options].base_url` pointed at this backend's inference endpoint (tiny model as the "provider"): the
    calls go through with the backend's key, the garbage answers are counted as unparseable, and the rollout keeps
    no judge score (it is never scored 0)."""
    from synth_ai.backend.trainers.rl.judge import Judge, require_judge_key
    from synth_ai.backend.trainers.rl.types import Rollout

    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    config = {"judge": {"timeout_s": 120, "options": {"provider": "groq", "model": TINY_TEXT,
                                                      "base_url": f"{backend.url}/api/inference/v1"}}}
    settings = require_judge_key(config)  # overridden URL: no provider key needed
    rollout = Rollout(seed=0, index=0, cid="c0", reward=1.0, response={"trajectories": [{"steps": [
        {"obs": {"question": "What color is the sky?"}, "tool_calls": [], "info": {"answer": "The sky is blue."}}]}]})
    report = Judge(settings).score([rollout])
    assert report.calls == 2 and report.scores == [] and rollout.judge == {}  # outcome and event, both unusable
    assert report.failures == {"unparseable": 2}, report.first_error
    assert "no score in [0, 1]" in report.first_error
