"""The loopback endpoint a verifiers environment's model calls go to, forwarding each to the rollout's policy.

verifiers sends a rollout's model calls to `<base_url>/chat/completions` (its client appends the path), so an
`inference_url` carrying `?cid=` cannot be handed to it: the query would end up in front of the path. Each rollout
gets a route here instead, `http://127.0.0.1:<port>/relay/<token>/v1`, and every call on it is sent to the
rollout's own `inference_url` (the query kept) with `synth_ai.taskapp.inference.chat_completion`: the same keys,
retries, errors and trace recording as the bundled task apps' calls. A streamed request (`stream: true`, what
verifiers' chat program sends) is answered as Server-Sent Events replayed from the finished completion.

The relay listens on loopback only and serves nothing but live tokens (unguessable, dropped when the rollout
ends); it runs on the event loop of the task app that owns it (aiohttp, a verifiers dependency).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from synth_ai.chat_sse import sse_events
from synth_ai.taskapp.errors import InferenceError
from synth_ai.taskapp.inference import chat_completion
from synth_ai.taskapp.tracing import use_trace
from synth_ai.tracing.session import SessionRecorder

# Keys of the request the relay sets itself: streaming is replayed here, the rest comes from the policy config.
_STREAM_KEYS = ("stream", "stream_options")


@dataclass
class Route:
    inference_url: str
    overrides: dict[str, Any]  # policy-config keys every call of the rollout carries (thinking_mode, seed, …)
    timeout_s: float
    recorder: SessionRecorder | None
    calls: int = 0


class Relay:
    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}
        self._runner: Any = None
        self.port: int | None = None

    async def start(self) -> None:
        if self._runner is not None:
            return
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024 * 1024)  # multimodal prompts carry base64 images
        app.router.add_post("/relay/{token}/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        self.port = runner.addresses[0][1]

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        self.port = None

    @contextlib.contextmanager
    def route(self, inference_url: str, *, overrides: dict[str, Any], timeout_s: float,
              recorder: SessionRecorder | None) -> Iterator[tuple[str, Route]]:
        """A base URL for one rollout's model calls (live until the block ends) and its route."""
        if self.port is None:
            raise RuntimeError("the relay is not started")
        token = secrets.token_urlsafe(18)
        route = Route(inference_url, dict(overrides), timeout_s, recorder)
        self._routes[token] = route
        try:
            yield f"http://127.0.0.1:{self.port}/relay/{token}/v1", route
        finally:
            self._routes.pop(token, None)

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        route = self._routes.get(request.match_info["token"])
        if route is None:
            return _error(web, 404, "unknown_route", "No rollout is using this relay route (it has ended).")
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _error(web, 400, "invalid_json", "The request body is not JSON.")
        if not isinstance(body, dict):
            return _error(web, 400, "invalid_request", "The request body must be a JSON object.")
        stream = body.get("stream") is True
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) if stream else False
        payload = {k: v for k, v in body.items() if k not in _STREAM_KEYS}
        payload.update(route.overrides)
        route.calls += 1
        with use_trace(route.recorder):
            try:
                completion = await chat_completion(route.inference_url, payload, timeout=route.timeout_s)
            except InferenceError as exc:
                return _error(web, exc.status_code, exc.code, exc.message)
        _fill_header(completion)
        if not stream:
            return web.json_response(completion)
        text = "".join(sse_events(completion, include_usage=include_usage))
        return web.Response(text=text, content_type="text/event-stream")


def _fill_header(completion: dict[str, Any]) -> None:
    """verifiers' client requires `id`, `created` and `model`, which some OpenAI-compatible servers leave out (the
    bundled task apps take their replies without them, so a verifiers environment does too)."""
    defaults = {"id": f"chatcmpl-{secrets.token_hex(8)}", "created": int(time.time()), "model": "policy"}
    for key, value in defaults.items():
        if completion.get(key) is None:
            completion[key] = value


def _error(web: Any, status: int, code: str, message: str) -> Any:
    return web.json_response({"error": {"message": message, "type": code, "code": code}}, status=status)
