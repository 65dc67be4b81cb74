"""POSTing rollouts to the task app from the trainer's event loop.

`TaskAppClient(base_url, headers, concurrency=..)` offers `await post_json(path, body, timeout_s)`, which returns an
answer (`status_code`, `text`, `json()`) or raises `TaskAppTimeout` (no answer in time), `TaskAppUnreachable` (nothing
took the request: `synth_ai.taskapp.reachability`) or `TaskAppRequestFailed` (the message says why).
A task app on this machine (plain http on a loopback host, the usual local RL setup) is called through
`synth_ai.loopback_http` (stdlib keep-alive connections: about 0.3 ms of CPU per request against httpx's 5 ms,
which the trainer's process would otherwise spend per rollout); any other URL through httpx.
"""

from __future__ import annotations

import json
from typing import Any

from synth_ai import loopback_http
from synth_ai.taskapp.reachability import unreachable_error
from synth_ai.urls import join_url

CONNECT_TIMEOUT_S = 10.0


class TaskAppTimeout(Exception):
    pass


class TaskAppUnreachable(Exception):
    """Nothing took the request (`synth_ai.taskapp.reachability.unreachable_error`)."""


class TaskAppRequestFailed(Exception):
    """The request failed in some other way (a protocol or decoding error)."""


class TaskAppClient:
    def __init__(self, base_url: str, headers: dict[str, str], *, concurrency: int) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Content-Type": "application/json", **headers}
        self._httpx: Any = None
        self._threads: Any = None
        if loopback_http.is_loopback_http(self.base_url):
            self._threads = loopback_http.DaemonPool(max(1, concurrency), "rollout-http")
        else:
            import httpx

            self._httpx = httpx.AsyncClient(headers=self.headers, follow_redirects=False,
                                            limits=httpx.Limits(max_connections=concurrency + 2))

    async def post_json(self, path: str, body: dict[str, Any], timeout_s: float) -> Any:
        data = json.dumps(body).encode()
        if self._httpx is None:
            try:
                return await loopback_http.post_json(join_url(self.base_url, path), data, self.headers, timeout_s,
                                                     connect_timeout_s=CONNECT_TIMEOUT_S, executor=self._threads)
            except loopback_http.LoopbackTimeout as exc:
                raise TaskAppTimeout(str(exc)) from exc
            except loopback_http.LoopbackUnreachable as exc:
                raise TaskAppUnreachable(str(exc)) from exc
        import httpx

        try:
            return await self._httpx.post(join_url(self.base_url, path), content=data,
                                          timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S))
        except httpx.HTTPError as exc:
            outage = unreachable_error(exc)
            if outage is not None:
                raise TaskAppUnreachable(outage) from exc
            if isinstance(exc, httpx.TimeoutException):
                raise TaskAppTimeout(str(exc)) from exc
            raise TaskAppRequestFailed(f"{type(exc).__name__}: {exc}") from exc

    @property
    def reusable(self) -> bool:
        """Whether it can serve another event loop (`asyncio.run` per iteration): the loopback one can, and keeps
        its threads and keep-alive connections across iterations."""
        return self._threads is not None

    async def aclose(self) -> None:
        if self._httpx is not None:
            await self._httpx.aclose()
        if self._threads is not None:  # a thread still in a request (cancelled rollouts) ends with its timeout
            self._threads.shutdown(wait=False, cancel_futures=True)
