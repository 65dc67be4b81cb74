"""The `POST /rollout` lane (`taskapp/rollout_lane.py`) answers exactly what the FastAPI route answers: the same
status and body for valid requests and for every kind of refusal (key, JSON, content type, validation, the app's
own errors), both apps served for real; valid requests take the lane; the OpenAPI schema keeps the route."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from taskapp_support import ENV_KEY, running_app
from test_taskapp_server import _config

from synth_ai.taskapp import create_task_app
from synth_ai.taskapp.errors import RolloutError
from synth_ai.taskapp.rollout_lane import RolloutLane

VALID = {"run_id": "r1", "env": {"env_name": "toy", "seed": 3, "config": {}}, "mode": "eval", "ops": ["agent"],
         "policy": {"policy_name": "p", "config": {"model": "m"}}}
KEY = {"X-API-Key": ENV_KEY}
JSON_TYPE = {"Content-Type": "application/json"}


def _rollout(request: Any, _http: Any) -> Any:
    if request.env.seed == 13:
        raise RolloutError("seed 13 is unlucky", status_code=409, code="unlucky")
    if request.env.seed == 14:
        raise RuntimeError("the environment broke")
    from test_taskapp_server import _rollout as toy_rollout

    return toy_rollout(request, _http)


def _without_lane(app: Any) -> Any:
    app.router.routes[:] = [r for r in app.router.routes if not isinstance(getattr(r, "app", None), RolloutLane)]
    return app


CASES = [
    ("valid", {**KEY, **JSON_TYPE}, json.dumps(VALID)),
    ("valid, json+charset", {**KEY, "Content-Type": "application/json; charset=utf-8"}, json.dumps(VALID)),
    ("valid, no content type", KEY, json.dumps(VALID)),
    ("valid, +json type", {**KEY, "Content-Type": "application/vnd.api+json"}, json.dumps(VALID)),
    ("no key", JSON_TYPE, json.dumps(VALID)),
    ("wrong key", {"X-API-Key": "sk_env_wrong_000000000000000", **JSON_TYPE}, json.dumps(VALID)),
    ("no mode", {**KEY, **JSON_TYPE}, json.dumps({k: v for k, v in VALID.items() if k != "mode"})),
    ("not json", {**KEY, **JSON_TYPE}, "{not json"),
    ("empty body", {**KEY, **JSON_TYPE}, ""),
    ("nested past the recursion limit", {**KEY, **JSON_TYPE}, '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    ("a list", {**KEY, **JSON_TYPE}, "[1, 2]"),
    ("NaN seed", {**KEY, **JSON_TYPE}, json.dumps({**VALID, "env": {**VALID["env"], "seed": float("nan")}})),
    ("text content type", {**KEY, "Content-Type": "text/plain"}, json.dumps(VALID)),
    ("the app refuses", {**KEY, **JSON_TYPE}, json.dumps({**VALID, "env": {**VALID["env"], "seed": 13}})),
    ("the app breaks", {**KEY, **JSON_TYPE}, json.dumps({**VALID, "env": {**VALID["env"], "seed": 14}})),
]


@pytest.fixture(autouse=True)
def env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)  # read per request (the suite clears it between tests)


@pytest.fixture(scope="module")
def apps() -> Any:
    lane_app = create_task_app(_config(rollout=_rollout))
    plain_app = _without_lane(create_task_app(_config(rollout=_rollout)))
    with running_app(lane_app) as lane, running_app(plain_app) as plain:
        yield lane_app, lane, plain


@pytest.mark.parametrize(("headers", "body"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_the_lane_answers_what_the_fastapi_route_answers(apps: Any, headers: dict[str, str], body: str) -> None:
    _, lane, plain = apps
    got = httpx.post(f"{lane}/rollout", content=body, headers=headers)
    want = httpx.post(f"{plain}/rollout", content=body, headers=headers)
    assert (got.status_code, got.json()) == (want.status_code, want.json())


def test_the_cases_cover_answers_and_refusals(apps: Any) -> None:
    """The parity cases meet a success and each kind of refusal, or they would prove little."""
    _, _, plain = apps
    statuses = {httpx.post(f"{plain}/rollout", content=body, headers=headers).status_code for _, headers, body in CASES}
    assert statuses >= {200, 400, 409, 422, 500}, statuses


def test_valid_requests_take_the_lane_and_the_schema_keeps_the_route(apps: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    app, lane, _ = apps
    taken: list[str] = []
    original = RolloutLane._accepted

    async def counting(self: RolloutLane, request: Any, body: bytes) -> Any:
        accepted = await original(self, request, body)
        taken.append("lane" if accepted is not None else "route")
        return accepted

    monkeypatch.setattr(RolloutLane, "_accepted", counting)
    assert httpx.post(f"{lane}/rollout", json=VALID, headers=KEY).status_code == 200
    assert httpx.post(f"{lane}/rollout", json={**VALID, "mode": None}, headers=KEY).status_code == 422
    assert taken == ["lane", "route"]
    schema = httpx.get(f"{lane}/openapi.json", headers=KEY).json()
    body_schema = schema["paths"]["/rollout"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body_schema["$ref"].endswith("/RolloutRequest")
    assert httpx.get(f"{lane}/rollout", headers=KEY).status_code == 405  # the lane takes POST only, as the route
