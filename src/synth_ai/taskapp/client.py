"""The one client of a task app's routes: a `RolloutRequest` in, a `RolloutAnswer` or a typed failure out
(`synth_ai.taskapp.failures`: timeout, unreachable, transport, HTTP, invalid). The RL trainer, `eval`,
`task-app validate` and the backend's create-time probe all call task apps through it.

    async with TaskAppClient(url, api_key=key) as app:
        answer = await app.rollout(request, timeout_s=60)     # RolloutAnswer (a JSON object), or raises
        info = await app.get("/task_info", params=[("seeds", "0")], timeout_s=10)

Bodies go on the wire as the request was built (`exclude_unset`): each caller keeps the exact keys that synth-ai
0.2.17's task apps receive from it. Answers are checked lightly (a JSON object) so the RL hot path pays no model
validation per rollout; `RolloutAnswer.validated()` checks the whole `RolloutResponse` where a report needs it.

A POST to plain `http://` on a loopback host goes through `synth_ai.loopback_http` (stdlib keep-alive connections:
about 0.3 ms of CPU per request against httpx's 5 ms, which the trainer's process would otherwise spend per
rollout), unless the caller hands in its own `httpx.AsyncClient` (`http=`: an ASGI transport for an app in
process, eval's connection limits); everything else goes through httpx. Redirects are never followed: they would
carry the key to whatever host the app names.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from synth_ai import loopback_http
from synth_ai.taskapp.contracts import RolloutRequest, RolloutResponse
from synth_ai.taskapp.failures import (
    TaskAppHTTPError,
    TaskAppInvalidResponse,
    TaskAppTimeout,
    TaskAppTransportError,
    TaskAppUnreachable,
)
from synth_ai.taskapp.reachability import unreachable_answer, unreachable_error
from synth_ai.urls import join_url

CONNECT_TIMEOUT_S = 10.0
NOT_JSON_CHARS = 200
DEFAULT_TIMEOUT_S = 300.0  # a loopback POST needs one; httpx callers otherwise get their client's own


@dataclass(frozen=True)
class TaskAppAnswer:
    """A 2xx answer: status, body text, and how long it took."""

    status_code: int
    text: str
    elapsed_ms: int
    url: str

    def json(self) -> Any:
        return json.loads(self.text)


@dataclass(frozen=True)
class RolloutAnswer:
    """A 2xx `/rollout` answer that is a JSON object (`doc`, as the app sent it)."""

    doc: dict[str, Any]
    status_code: int
    elapsed_ms: int
    url: str

    @property
    def trajectories(self) -> list[dict[str, Any]]:
        """The trajectories that are objects (see `require_trajectories` to insist on the list)."""
        found = self.doc.get("trajectories")
        return [t for t in found if isinstance(t, dict)] if isinstance(found, list) else []

    @property
    def step_count(self) -> int:
        return sum(len(t.get("steps") or []) for t in self.trajectories)

    def require_trajectories(self) -> RolloutAnswer:
        """Itself, when it has a `trajectories` list; else `TaskAppInvalidResponse` naming the field."""
        if not isinstance(self.doc.get("trajectories"), list):
            raise TaskAppInvalidResponse("the answer has no `trajectories` list", field="trajectories",
                                         url=self.url, status_code=self.status_code)
        return self

    def validated(self) -> RolloutResponse:
        """The whole answer checked against the contract; `TaskAppInvalidResponse` names the first bad field."""
        from pydantic import ValidationError

        try:
            return RolloutResponse.model_validate(self.doc)
        except ValidationError as exc:
            raise invalid_from(exc, url=self.url, status_code=self.status_code) from None


def invalid_from(exc: Any, *, url: str, status_code: int | None) -> TaskAppInvalidResponse:
    """A pydantic `ValidationError` as the failure that names its first field (`a.0.b`, `(root)` for the body)."""
    errors = exc.errors()
    first = errors[0] if errors else {}
    field = ".".join(str(p) for p in first.get("loc", ())) or "(root)"
    return TaskAppInvalidResponse(f"field '{field}': {first.get('msg', exc)}", field=field, url=url,
                                  status_code=status_code)


def wire_body(request: RolloutRequest) -> dict[str, Any]:
    """The `/rollout` body: the keys the caller set, nothing the model would add by default."""
    return request.model_dump(mode="json", exclude_unset=True)


class TaskAppClient:
    """Calls to one task app. `headers` go with every request (`api_key` adds `X-API-Key`); `concurrency` sizes
    the connection pool; `http`, an `httpx.AsyncClient` the caller owns, carries every request (and is not closed
    here)."""

    def __init__(self, base_url: str, *, api_key: str | None = None, headers: dict[str, str] | None = None,
                 concurrency: int = 4, http: Any = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {**({"X-API-Key": api_key} if api_key else {}), **(headers or {})}
        self.concurrency = max(1, concurrency)
        self._given = http
        self._own: Any = None
        self._threads: loopback_http.DaemonPool | None = None
        if http is None and loopback_http.is_loopback_http(self.base_url):
            # its own threads: the app's policy calls may wait on the shared pool in this very process
            self._threads = loopback_http.DaemonPool(self.concurrency, "rollout-http")

    async def __aenter__(self) -> TaskAppClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def reusable(self) -> bool:
        """Whether it can serve another event loop (`asyncio.run` per RL iteration): an httpx client belongs to the
        loop it was first used in; the loopback threads and their keep-alive connections do not."""
        return self._own is None and self._given is None

    async def aclose(self) -> None:
        if self._own is not None:
            await self._own.aclose()
            self._own = None
        if self._threads is not None:  # a thread still in a request (cancelled rollouts) ends with its timeout
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None

    async def rollout(self, request: RolloutRequest, *, timeout_s: float | None = None) -> RolloutAnswer:
        """POST `/rollout`; the answer when it is a JSON object, else a typed failure."""
        answer = await self.post_json("/rollout", wire_body(request), timeout_s=timeout_s)
        try:
            doc = answer.json()
        except ValueError:
            raise TaskAppInvalidResponse(f"not JSON: {answer.text[:NOT_JSON_CHARS]!r}", field="(root)",
                                         url=answer.url, status_code=answer.status_code) from None
        if not isinstance(doc, dict):
            raise TaskAppInvalidResponse(f"the answer is {type(doc).__name__}, not a JSON object", field="(root)",
                                         url=answer.url, status_code=answer.status_code)
        return RolloutAnswer(doc, answer.status_code, answer.elapsed_ms, answer.url)

    async def post_json(self, path: str, body: Any, *, timeout_s: float | None = None,
                        headers: dict[str, str] | None = None) -> TaskAppAnswer:
        """POST a JSON body; a 2xx answer, else a typed failure."""
        url = join_url(self.base_url, path)
        sent = {"Content-Type": "application/json", **self.headers, **(headers or {})}
        data = json.dumps(body).encode()
        if self._threads is not None:
            return await self._loopback_post(url, data, sent, timeout_s)
        return await self._httpx_send("POST", url, sent, timeout_s, content=data)

    async def get(self, path: str, *, params: Any = None, timeout_s: float | None = None,
                  headers: dict[str, str] | None = None) -> TaskAppAnswer:
        """GET a route (`/`, `/health`, `/info`, `/task_info`); a 2xx answer, else a typed failure."""
        url = join_url(self.base_url, path)
        return await self._httpx_send("GET", url, {**self.headers, **(headers or {})}, timeout_s, params=params)

    async def _loopback_post(self, url: str, data: bytes, headers: dict[str, str],
                             timeout_s: float | None) -> TaskAppAnswer:
        timeout = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        started = time.perf_counter()
        try:
            answer = await loopback_http.post_json(url, data, headers, timeout, connect_timeout_s=CONNECT_TIMEOUT_S,
                                                   executor=self._threads)
        except loopback_http.LoopbackTimeout as exc:
            raise TaskAppTimeout(f"POST {url} did not answer within {timeout:g}s", url=url,
                                 timeout_s=timeout) from exc
        except loopback_http.LoopbackUnreachable as exc:
            raise TaskAppUnreachable(unreachable_error(exc) or str(exc), url=url) from exc
        return _checked(url, answer.status_code, answer.text, started)

    async def _httpx_send(self, method: str, url: str, headers: dict[str, str], timeout_s: float | None,
                          **kw: Any) -> TaskAppAnswer:
        import httpx

        client = self._http()
        if timeout_s is not None:
            kw["timeout"] = httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))
        started = time.perf_counter()
        try:
            response = await client.request(method, url, headers=headers, **kw)
        except httpx.HTTPError as exc:
            why = unreachable_error(exc)
            if why is not None:
                raise TaskAppUnreachable(why, url=url) from exc
            if isinstance(exc, httpx.TimeoutException):
                waited = f" within {timeout_s:g}s" if timeout_s is not None else ""
                raise TaskAppTimeout(f"{method} {url} did not answer{waited}", url=url, timeout_s=timeout_s) from exc
            raise TaskAppTransportError(f"{type(exc).__name__}: {exc}", url=url) from exc
        return _checked(url, response.status_code, response.text, started)

    def _http(self) -> Any:
        if self._given is not None:
            return self._given
        if self._own is None:
            import httpx

            self._own = httpx.AsyncClient(follow_redirects=False,
                                          limits=httpx.Limits(max_connections=self.concurrency + 2))
        return self._own


def _checked(url: str, status: int, text: str, started: float) -> TaskAppAnswer:
    """The answer when it is 2xx; a gateway standing in for the app is `TaskAppUnreachable`, any other status of
    400 or more `TaskAppHTTPError`."""
    gateway = unreachable_answer(status, text)
    if gateway is not None:
        raise TaskAppUnreachable(gateway, url=url, status_code=status, text=text)
    if status >= 400:
        raise TaskAppHTTPError(status, text, url=url)
    return TaskAppAnswer(status, text, int((time.perf_counter() - started) * 1000), url)


def run_sync(coro: Any) -> Any:
    """Run a coroutine of this client from synchronous code: here when no event loop runs in this thread, else in
    a thread of its own (a sync route or hook may be called from inside a loop)."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="taskapp-call") as pool:
        return pool.submit(asyncio.run, coro).result()


__all__ = ["RolloutAnswer", "TaskAppAnswer", "TaskAppClient", "invalid_from", "run_sync", "wire_body"]
