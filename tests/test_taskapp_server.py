"""The task-app server: routes, the auth matrix of the reference (§5.2), request validation, task_info seeds."""

from __future__ import annotations

import httpx
import pytest
from taskapp_support import ENV_KEY, headers, running_app

from synth_ai.taskapp import (
    RolloutMetrics,
    RolloutResponse,
    RolloutStep,
    RolloutTrajectory,
    TaskAppConfig,
    TaskInfo,
    create_task_app,
)


def _rollout(request, _):
    step = RolloutStep(obs={"seed": request.env.seed}, tool_calls=[], reward=0.5, done=True,
                       info={"meta": {"inference_url": "http://model/v1/chat/completions?cid=x"}})
    return RolloutResponse(
        run_id=request.run_id,
        trajectories=[RolloutTrajectory(env_id="e", policy_id="p", steps=[step], length=1,
                                        inference_url="http://model/v1/chat/completions?cid=x")],
        metrics=RolloutMetrics(episode_returns=[0.5], mean_return=0.5, num_steps=1),
        pipeline_metadata={"inference_url": "http://model/v1/chat/completions?cid=x"},
    )


def _config(**overrides) -> TaskAppConfig:
    info = TaskInfo(task={"id": "toy", "name": "Toy", "version": "0.1"}, environment="toy",
                    dataset={"id": "toy", "splits": ["train"]})
    kwargs = dict(
        app_id="toy-app", name="Toy", description="a toy app", base_task_info=info,
        describe_taskset=lambda: {"id": "toy", "size": 3},
        provide_task_instances=lambda seeds: [info.model_copy(update={"task_metadata": {"seed": s}}) for s in seeds],
        rollout=_rollout,
    )
    kwargs.update(overrides)
    return TaskAppConfig(**kwargs)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    with running_app(create_task_app(_config())) as base:
        yield base


def test_root_and_head_need_no_key(toy):
    assert httpx.get(f"{toy}/").json() == {"status": "ok", "service": "toy-app"}
    assert httpx.head(f"{toy}/").status_code == 200


@pytest.mark.parametrize("hdrs", [
    {"X-API-Key": ENV_KEY},
    {"X-API-Keys": f"nope,{ENV_KEY}"},
    {"Authorization": f"Bearer {ENV_KEY}"},
    {"X-API-Key": f"wrong, {ENV_KEY}"},
])
def test_accepted_key_forms(toy, hdrs):
    response = httpx.get(f"{toy}/health", headers=hdrs)
    assert response.status_code == 200
    body = response.json()
    assert body["healthy"] is True and body["auth"]["required"] is True
    assert ENV_KEY not in response.text


@pytest.mark.parametrize("hdrs", [{}, {"X-API-Key": "sk_env_wrong_key_000000"}, {"Authorization": "Basic abc"},
                                  {"Authorization": "Bearer sk_env_wrong_key_000000"}])
def test_missing_or_wrong_key_is_400_unauthorised_without_echoing_keys(toy, hdrs):
    for method, path in (("GET", "/health"), ("GET", "/info"), ("GET", "/task_info"), ("POST", "/done"),
                         ("GET", "/debug/env")):
        response = httpx.request(method, f"{toy}{path}", headers=hdrs)
        assert response.status_code == 400, (path, response.text)
        error = response.json()["detail"]["error"]
        assert error["code"] == "unauthorised"
        assert error["message"] == "API key missing or invalid"
        assert error["allowed_count"] == 1
        assert set(error) >= {"allowed_first15", "got_first15", "got_lens"}
        assert ENV_KEY not in response.text
        assert "sk_env_wrong_key_000000" not in response.text
    if "X-API-Key" in hdrs:
        assert error["got_lens"] == [len(hdrs["X-API-Key"])]


def test_aliases_and_dev_fallbacks(monkeypatch):
    monkeypatch.setenv("DEV_ENVIRONMENT_API_KEY", "dev_key_abcdef123456")
    monkeypatch.setenv("ENVIRONMENT_API_KEY_ALIASES", "alias_one_123456, alias_two_123456")
    with running_app(create_task_app(_config())) as base:
        for key in ("dev_key_abcdef123456", "alias_one_123456", "alias_two_123456"):
            assert httpx.get(f"{base}/health", headers={"X-API-Key": key}).status_code == 200, key
        bad = httpx.get(f"{base}/health", headers={"X-API-Key": "other"})
        assert bad.status_code == 400
        assert bad.json()["detail"]["error"]["allowed_count"] == 3


def test_no_key_configured_is_503(monkeypatch):
    with running_app(create_task_app(_config())) as base:
        response = httpx.get(f"{base}/health", headers={"X-API-Key": "anything"})
    assert response.status_code == 503
    assert response.json()["detail"]["error"]["code"] == "missing_environment_api_key"


def test_auth_can_be_disabled(monkeypatch):
    with running_app(create_task_app(_config(require_api_key=False))) as base:
        assert httpx.get(f"{base}/health").status_code == 200


def test_info_and_task_info_variants(toy):
    info = httpx.get(f"{toy}/info", headers=headers()).json()
    assert info["service"]["task"]["id"] == "toy" and info["service"]["version"] == "0.1"
    assert info["dataset"]["splits"] == ["train"]
    assert httpx.get(f"{toy}/task_info", headers=headers()).json() == {"taskset": {"id": "toy", "size": 3}}
    one = httpx.get(f"{toy}/task_info", params={"seed": 4}, headers=headers()).json()
    assert isinstance(one, dict) and one["task_metadata"] == {"seed": 4} and one["environment"] == "toy"
    many = httpx.get(f"{toy}/task_info", params=[("seed", 1), ("seed", 2)], headers=headers()).json()
    assert [i["task_metadata"]["seed"] for i in many] == [1, 2]
    via_seeds = httpx.get(f"{toy}/task_info", params=[("seeds", 5), ("seeds", 6), ("seeds", 7)],
                          headers=headers()).json()
    assert [i["task_metadata"]["seed"] for i in via_seeds] == [5, 6, 7]
    bad = httpx.get(f"{toy}/task_info", params={"seed": "x"}, headers=headers())
    assert bad.status_code == 422 and bad.json()["detail"]["error"]["code"] == "invalid_seed"


def test_rollout_requires_mode_and_validates(toy):
    body = {"run_id": "r1", "env": {"seed": 3}, "policy": {"config": {}}, "ops": ["agent", "env"]}
    missing = httpx.post(f"{toy}/rollout", json=body, headers=headers())
    assert missing.status_code == 422
    assert any(e["loc"][-1] == "mode" for e in missing.json()["detail"])
    wrong = httpx.post(f"{toy}/rollout", json={**body, "mode": "train"}, headers=headers())
    assert wrong.status_code == 422
    ok = httpx.post(f"{toy}/rollout", json={**body, "mode": "rl"}, headers=headers())
    assert ok.status_code == 200
    doc = ok.json()
    assert doc["run_id"] == "r1" and doc["trajectories"][0]["steps"][0]["obs"] == {"seed": 3}
    assert doc["trajectories"][0]["steps"][0]["info"]["meta"]["inference_url"]
    assert doc["trace"] is None  # tracing off and return_trace not asked
    assert set(doc) >= {"branches", "metrics", "aborted", "ops_executed", "trace_correlation_id",
                        "pipeline_metadata"}


def test_rollout_failure_is_a_coded_error_without_secrets(monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret-value-123456")

    def broken(request, _):
        raise RuntimeError("boom with sk-openai-secret-value-123456 inside")

    with running_app(create_task_app(_config(rollout=broken))) as base:
        body = {"run_id": "r", "env": {}, "policy": {}, "ops": [], "mode": "eval"}
        response = httpx.post(f"{base}/rollout", json=body, headers=headers())
    assert response.status_code == 500
    error = response.json()["detail"]["error"]
    assert error["code"] == "rollout_failed" and "boom" in error["message"]
    assert "sk-openai-secret-value-123456" not in response.text


def test_debug_env_masks_secrets(monkeypatch, toy):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret-value-123456")
    response = httpx.get(f"{toy}/debug/env", headers=headers())
    doc = response.json()
    assert doc["has_ENVIRONMENT_API_KEY"] is True
    assert "sk-openai-secret-value-123456" not in response.text and ENV_KEY not in response.text
    assert doc["OPENAI_API_KEY_prefix"].startswith("sk-o")
    assert doc["OPENAI_API_KEY_prefix"] == "sk-o…56" and doc["GROQ_API_KEY_prefix"] == "<unset>"


def test_done_route(toy):
    assert httpx.post(f"{toy}/done", headers=headers()).json() == {"ok": True, "service": "toy-app"}


def test_vendor_proxy_adds_the_apps_key(monkeypatch):
    from taskapp_support import completion, scripted_model

    from synth_ai.taskapp import ProxyConfig

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    with scripted_model(lambda body: completion(content="proxied")) as (model_url, model):
        proxy = ProxyConfig(enable_openai=True, system_hint="Be brief.", openai_url=model_url)
        with running_app(create_task_app(_config(proxy=proxy))) as base:
            body = {"model": "gpt", "messages": [{"role": "user", "content": "hi"}]}
            missing = httpx.post(f"{base}/proxy/v1/chat/completions", json=body, headers=headers())
            assert missing.status_code == 503
            assert missing.json()["detail"]["error"]["code"] == "missing_openai_api_key"
            monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-proxy-key-123456")
            assert httpx.post(f"{base}/proxy/v1/chat/completions", json=body).status_code == 400
            ok = httpx.post(f"{base}/proxy/v1/chat/completions", json=body, headers=headers())
            for bad in (b"{not json", b"[]"):  # a 400 that says so, not a 500
                refused = httpx.post(f"{base}/proxy/v1/chat/completions", content=bad,
                                     headers={**headers(), "Content-Type": "application/json"})
                assert refused.status_code == 400 and refused.json()["detail"]["error"]["code"] == "invalid_request"
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "proxied"
    sent = model.requests[0]
    assert sent["headers"]["authorization"] == "Bearer sk-openai-proxy-key-123456"
    assert sent["body"]["messages"][0] == {"role": "system", "content": "Be brief."}
