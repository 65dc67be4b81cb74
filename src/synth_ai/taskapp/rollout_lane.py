"""A lane for `POST /rollout` that skips FastAPI's per-request machinery when the request is plainly valid.

Why: a task app spends about a third of its CPU per rollout in FastAPI's route machinery (dependency solving, body
handling, the endpoint's wrapping): measured on the color-quiz app with an instant policy, 32 rollouts at a time,
1.65 ms of CPU per rollout through the FastAPI route against 1.2 ms through this lane. During RL that CPU is on the
iteration's path twice (before the policy call and after it), for every rollout.

`RolloutLane` is an ASGI app routed in front of the FastAPI route (same path, POST). It reads the body and takes the
request only when its content type is JSON (as FastAPI requires), the key check passes and the body
parses with `json` and validates as a `RolloutRequest` (what FastAPI does with it); it then runs the same handler.
Anything else is replayed, body and all, to the FastAPI route, so every refusal (401/400 key answers, 422 bodies)
is exactly FastAPI's. The FastAPI route stays registered: the OpenAPI schema does not change.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from synth_ai.taskapp.contracts import RolloutRequest
from synth_ai.taskapp.errors import TaskAppError


class RolloutLane:
    def __init__(self, route: Any, answer: Callable[[RolloutRequest, Any], Awaitable[Any]],
                 check_key: Callable[[Any], Awaitable[None]] | None) -> None:
        self.route = route  # the FastAPI route of POST /rollout
        self.answer = answer
        self.check_key = check_key

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from starlette.requests import Request

        body, whole = await _read_body(receive)
        if not whole:
            return  # the client left before sending its body: no one to answer
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()  # after the body: a disconnect, as the server reports it
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        request = Request(scope, replay)
        rollout_request = await self._accepted(request, body)
        if rollout_request is None:
            _, child = self.route.matches(scope)
            await self.route.handle({**scope, **child}, replay, send)
            return
        response = await self.answer(rollout_request, request)
        await response(scope, replay, send)

    async def _accepted(self, request: Any, body: bytes) -> RolloutRequest | None:
        kind = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
        if kind != "application/json" and not kind.endswith("+json"):
            return None  # FastAPI reads only a JSON content type's body as JSON (none at all: a 422)
        if self.check_key is not None:
            try:
                await self.check_key(request)
            except TaskAppError:
                return None
        try:
            return RolloutRequest.model_validate(json.loads(body))
        except (ValueError, RecursionError, ValidationError):  # not JSON, nested past Python's limit, not a rollout
            return None


async def _read_body(receive: Any) -> tuple[bytes, bool]:
    """The request body, and whether it came whole (False: the client disconnected first)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), True
