"""`task-app validate` / `task-app info` and the verifier API against real servers: a good app, a wrong key, a
dead URL, a missing route, a schema mismatch, a slow app, and a real rollout through a scripted model."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi import FastAPI, Query
from taskapp_support import ENV_KEY, completion, math_entry, running_app, scripted_model, tool_call

from synth_ai.taskapp import create_task_app
from synth_ai.taskapp.verify import check_health, check_task_info, verify_task_app


def _contract_like_app(*, fault: str | None = None, seconds_per_instance: float = 0.0) -> FastAPI:
    """A hand-written app speaking the contract (as one built with another SDK would), with one fault; it may take
    `seconds_per_instance` to build each task instance, as 0.2.17's crafter builds a world per seed."""
    app = FastAPI()
    instance = {"task": {"id": "raw", "name": "Raw"}, "environment": "raw"}

    @app.get("/")
    async def root():
        return {"status": "ok", "service": "raw"}

    @app.get("/health")
    async def health():
        if fault == "slow":
            await asyncio.sleep(1)
        return {"healthy": True}

    if fault != "missing_route":
        @app.get("/info")
        async def info():
            return {"service": {"task": {"id": "raw", "name": "Raw"}}}

        @app.get("/task_info")
        async def task_info(seeds: list[int] | None = Query(None), seed: list[int] | None = Query(None)):
            wanted = (seeds or []) + (seed or [])
            if not wanted:
                return {"taskset": {"id": "raw"}}
            await asyncio.sleep(seconds_per_instance * len(wanted))
            bad = {"task": {"id": "raw", "name": "Raw"}}  # no "environment"
            return [bad if fault == "schema" else instance for _ in wanted]

        @app.post("/rollout")
        async def rollout(body: dict):
            return {"detail": "no"} if "mode" in body else __import__("fastapi").responses.JSONResponse(
                {"detail": [{"loc": ["body", "mode"]}]}, status_code=422)

    return app


@pytest.fixture
def math_server(monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    with running_app(create_task_app(math_entry().config_factory())) as base:
        yield base


def test_validate_good_app_by_url(cli, math_server):
    result = cli("task-app", "validate", "--url", math_server, "--api-key", ENV_KEY)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "6/6 checks passed" in result.stdout
    doc = cli("task-app", "validate", "--url", math_server, "--json").json()  # key from ENVIRONMENT_API_KEY
    assert doc["ok"] is True and [c["name"] for c in doc["checks"]] == [
        "root", "health", "info", "task_info", "task_instances", "rollout"]


def test_validate_wrong_key_is_auth(cli, math_server):
    result = cli("task-app", "validate", "--url", math_server, "--api-key", "sk_env_wrong_000000", "--json")
    assert result.exit_code == 4
    doc = result.json()
    health = next(c for c in doc["checks"] if c["name"] == "health")
    assert health["kind"] == "auth" and health["status_code"] == 400
    assert ENV_KEY not in result.stdout and "sk_env_wrong_000000" not in result.stdout


def test_validate_dead_url_is_network(cli):
    result = cli("task-app", "validate", "--url", "http://127.0.0.1:9", "--api-key", "k" * 16, "--json")
    assert result.exit_code == 5
    assert result.json()["checks"][0]["kind"] == "unreachable"


def test_validate_missing_route_is_not_found(cli):
    with running_app(_contract_like_app(fault="missing_route")) as base:
        result = cli("task-app", "validate", "--url", base, "--api-key", ENV_KEY, "--json")
    assert result.exit_code == 8
    failing = [c for c in result.json()["checks"] if not c["ok"]]
    assert failing[0]["name"] == "info" and failing[0]["kind"] == "missing_route"


def test_validate_schema_mismatch_names_the_field(cli):
    with running_app(_contract_like_app(fault="schema")) as base:
        result = cli("task-app", "validate", "--url", base, "--api-key", ENV_KEY, "--json")
    assert result.exit_code == 3
    failing = next(c for c in result.json()["checks"] if not c["ok"])
    assert failing["kind"] == "schema" and failing["field"] == "0.environment"
    assert "field '0.environment'" in failing["message"]


def test_contract_like_app_from_another_sdk_passes(cli):
    with running_app(_contract_like_app()) as base:
        result = cli("task-app", "validate", "--url", base, "--api-key", ENV_KEY)
    assert result.exit_code == 0, result.stdout


def test_slow_app_is_timeout():
    with running_app(_contract_like_app(fault="slow")) as base:
        report = check_health(base, ENV_KEY, timeout=0.2)
    assert report.kind == "timeout" and report.exit_code == 7


def test_task_instances_get_the_timeout_per_seed(cli):
    """6 instances at 0.5 s each answer after about 3 s: past a fixed 1.5 s per request, within 1.5 s per seed."""
    with running_app(_contract_like_app(seconds_per_instance=0.5)) as base:
        result = cli("task-app", "validate", "--url", base, "--api-key", ENV_KEY, "--timeout", "1.5",
                     "--min-instances", "6", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    instances = next(c for c in result.json()["checks"] if c["name"] == "task_instances")
    assert instances["ok"] and "6 task instance(s)" in instances["message"]


def test_a_task_instances_timeout_says_what_it_waited_for(cli):
    with running_app(_contract_like_app(seconds_per_instance=0.5)) as base:
        result = cli("task-app", "validate", "--url", base, "--api-key", ENV_KEY, "--timeout", "0.1",
                     "--min-instances", "6", "--json")
    assert result.exit_code == 7, result.stdout + result.stderr
    failing = next(c for c in result.json()["checks"] if not c["ok"])
    assert failing["name"] == "task_instances" and failing["kind"] == "timeout"
    assert failing["message"] == (f"GET {base}/task_info did not answer within 0.6s, the time allowed for the 6 "
                                  "task instance(s) it was asked for (seeds 0-5, 0.1s each)")


def test_validate_in_process_with_real_rollout(cli, monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    with scripted_model(lambda body: completion(tool_calls=[tool_call("math_submit", {"answer": "1"})])) \
            as (model_url, model):
        result = cli("task-app", "validate", "math-single-step", "--inference-url", model_url, "--model", "m",
                     "--min-instances", "3", "--json")
    assert result.exit_code == 0, result.stdout
    rollout = result.json()["checks"][-1]
    assert rollout["name"] == "rollout" and rollout["ok"] and "1 step(s)" in rollout["message"]
    assert "warnings" not in rollout  # meets the RL trainer's expectations
    assert model.requests[0]["query"]["cid"].startswith("verify-")


def test_validate_in_process_without_a_configured_key(cli):
    result = cli("task-app", "validate", "math")
    assert result.exit_code == 0, result.stdout + result.stderr


def test_validate_reports_failing_rollout(cli, monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    with scripted_model(lambda body: (500, "model exploded")) as (model_url, _):
        result = cli("task-app", "validate", "math", "--inference-url", model_url, "--model", "m", "--json")
    assert result.exit_code == 9
    rollout = result.json()["checks"][-1]
    assert rollout["kind"] == "server_error" and "model exploded" in rollout["message"]


def test_info_command(cli, math_server, monkeypatch):
    monkeypatch.setenv("TASK_APP_BASE_URL", math_server)
    result = cli("task-app", "info", "--api-key", ENV_KEY)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["taskset"]["id"] == "math_single_step"
    seeds = cli("task-app", "info", "--base", math_server, "--seed", "1", "--seed", "2", "--json")
    assert [i["task_metadata"]["seed"] for i in seeds.json()] == [1, 2]
    wrong = cli("task-app", "info", "--base", math_server, "--api-key", "bad-key-0000000")
    assert wrong.exit_code == 4 and "rejected the API key" in wrong.stderr
    monkeypatch.delenv("ENVIRONMENT_API_KEY")
    missing = cli("task-app", "info", "--base", math_server)
    assert missing.exit_code == 4
    assert "Missing API key. Provide --api-key or set ENVIRONMENT_API_KEY." in missing.stderr
    dead = cli("task-app", "info", "--base", "http://127.0.0.1:9", "--api-key", ENV_KEY)
    assert dead.exit_code == 5


def test_check_task_info_api(math_server):
    result = check_task_info(math_server, ENV_KEY, seeds=[0, 1], min_instances=2)
    assert result.ok and len(result.data) == 2
    report = verify_task_app(math_server, ENV_KEY, min_instances=2)
    assert report.ok and report.exit_code == 0
