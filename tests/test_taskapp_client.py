"""The one task-app client (`synth_ai.taskapp.client`): a `RolloutRequest` in, a `RolloutAnswer` or a typed failure
out. Against real uvicorn servers (the bundled math app, and a hand-written app with one fault per route); an httpx
transport fake only where a fault cannot be made by a server (a body that fails to decode)."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse
from taskapp_support import ENV_KEY, completion, math_entry, rollout_body, running_app, scripted_model, tool_call

from synth_ai.taskapp import create_task_app
from synth_ai.taskapp.client import TaskAppClient, wire_body
from synth_ai.taskapp.contracts import RolloutRequest
from synth_ai.taskapp.failures import (
    TaskAppHTTPError,
    TaskAppInvalidResponse,
    TaskAppTimeout,
    TaskAppTransportError,
    TaskAppUnreachable,
)

PLANTED = "sk_env_planted_secret_0123456789"


def _faulty_app() -> FastAPI:
    """One fault per route; the 500 echoes the planted key, as a careless app might."""
    app = FastAPI()

    @app.post("/slow")
    async def slow():
        await asyncio.sleep(3)
        return {}

    @app.post("/gateway")
    async def gateway():
        return PlainTextResponse("<html><h1>502 Bad Gateway</h1></html>", status_code=502)

    @app.post("/coded")
    async def coded():
        return JSONResponse({"detail": {"error": {"code": "inference_failed", "message": "model exploded"}}},
                            status_code=502)

    @app.post("/echo")
    async def echo():
        return PlainTextResponse(f"boom: key {PLANTED} rejected", status_code=500)

    @app.post("/text/rollout")
    async def text_rollout():
        return PlainTextResponse("this is not JSON", status_code=200)

    @app.post("/rollout")
    async def rollout(body: dict):  # a JSON object, but not a rollout response
        return {"run_id": body.get("run_id"), "trajectories": []}

    return app


def _request(inference_url: str, seed: int = 1) -> RolloutRequest:
    return RolloutRequest.model_validate(rollout_body(inference_url, seed=seed))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_rollout_against_the_math_app_is_a_checked_answer(monkeypatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    answer_tool = tool_call("math_submit", {"answer": "1"})
    with scripted_model(lambda body: completion(tool_calls=[answer_tool])) as (model_url, model), \
            running_app(create_task_app(math_entry().config_factory())) as base:

        async def go():
            async with TaskAppClient(base, api_key=ENV_KEY) as app:
                return await app.rollout(_request(f"{model_url}?cid=c-1"), timeout_s=60), \
                    await app.get("/task_info", params=[("seeds", "0")], timeout_s=30)

        answer, info = asyncio.run(go())
    assert answer.status_code == 200 and answer.step_count == 1
    assert answer.validated().run_id == "run-1" and info.json()["task"]["id"]
    assert model.requests[0]["query"]["cid"] == "c-1"  # the request went out as built


def test_the_wire_body_is_exactly_the_keys_the_caller_set() -> None:
    """No defaults added: each caller keeps the body synth-ai 0.2.17's apps receive from it."""
    body = rollout_body("http://127.0.0.1:9/v1?cid=x", seed=4)
    assert wire_body(RolloutRequest.model_validate(body)) == body
    assert "record" not in body and "safety" not in body


def test_a_refused_key_is_an_http_failure_that_says_so(monkeypatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    with running_app(create_task_app(math_entry().config_factory())) as base:
        with pytest.raises(TaskAppHTTPError) as info:
            asyncio.run(_rollout(base, "sk_env_wrong_key_000000000"))
    assert info.value.auth_refused and info.value.status_code in (400, 401, 403)


async def _rollout(base: str, key: str | None = None, path: str = "/rollout", timeout_s: float = 30,
                   http: httpx.AsyncClient | None = None):
    async with TaskAppClient(base, api_key=key, http=http) as app:
        if path == "/rollout":
            return await app.rollout(_request("http://127.0.0.1:9/v1"), timeout_s=timeout_s)
        return await app.post_json(path, {}, timeout_s=timeout_s)


@pytest.mark.parametrize("through_httpx", [False, True], ids=["loopback", "httpx"])
def test_each_fault_has_its_type(monkeypatch, through_httpx: bool) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", PLANTED)  # a known secret: masked wherever it shows

    async def call(base: str, path: str, timeout_s: float = 30):
        if not through_httpx:
            return await _rollout(base, path=path, timeout_s=timeout_s)
        async with httpx.AsyncClient() as http:
            return await _rollout(base, path=path, timeout_s=timeout_s, http=http)

    with running_app(_faulty_app()) as base:
        with pytest.raises(TaskAppTimeout):
            asyncio.run(call(base, "/slow", timeout_s=0.5))
        with pytest.raises(TaskAppUnreachable) as gateway:
            asyncio.run(call(base, "/gateway"))
        assert gateway.value.status_code == 502 and "gateway" in gateway.value.reason
        with pytest.raises(TaskAppHTTPError) as coded:  # the app's own 502 is an answer, not an outage
            asyncio.run(call(base, "/coded"))
        assert coded.value.error_code == "inference_failed" and coded.value.error_message == "model exploded"
        assert coded.value.detail == "inference_failed: model exploded" and not coded.value.auth_refused
        with pytest.raises(TaskAppHTTPError) as echoed:
            asyncio.run(call(base, "/echo"))
        assert echoed.value.status_code == 500 and "boom" in echoed.value.excerpt
        assert all(PLANTED not in text for text in (str(echoed.value), echoed.value.excerpt, echoed.value.detail))
        with pytest.raises(TaskAppHTTPError) as missing:
            asyncio.run(call(base, "/nowhere"))
        assert missing.value.status_code == 404
        with pytest.raises(TaskAppInvalidResponse) as garbage:  # /rollout answers 200 with text
            asyncio.run(call(f"{base}/text", "/rollout"))
        answer = asyncio.run(call(base, "/rollout"))
        with pytest.raises(TaskAppInvalidResponse) as invalid:
            answer.validated()
    assert invalid.value.field == "metrics" and "metrics" in invalid.value.reason
    assert garbage.value.field == "(root)"


@pytest.mark.parametrize("through_httpx", [False, True], ids=["loopback", "httpx"])
def test_nothing_listening_is_unreachable(through_httpx: bool) -> None:
    base = f"http://127.0.0.1:{_free_port()}"

    async def call():
        if not through_httpx:
            return await _rollout(base)
        async with httpx.AsyncClient() as http:
            return await _rollout(base, http=http)

    with pytest.raises(TaskAppUnreachable) as info:
        asyncio.run(call())
    assert info.value.status_code is None and info.value.kind == "unreachable"


def test_a_body_that_fails_to_decode_is_a_transport_failure() -> None:
    """A fault no real server here makes on purpose: a gzip header over a body that is not gzip."""
    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Encoding": "gzip"}, content=b"not gzip at all")

    async def call():
        async with httpx.AsyncClient(transport=httpx.MockTransport(broken)) as http:
            return await _rollout("http://task-app.example", http=http)

    with pytest.raises(TaskAppTransportError) as info:
        asyncio.run(call())
    assert info.value.kind == "transport" and "DecodingError" in info.value.reason
