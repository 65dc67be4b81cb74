"""Whether a task app is unreachable, and a bounded wait for it to come back: the one rule RL training and
`synth-ai eval` share.

Unreachable means nothing behind the URL took the request:

- the connection failed: refused, reset, closed before an answer, a DNS failure, a connect timeout
  (`unreachable_error`);
- or a gateway answered for the app: 502, 503 or 504 without the task app's own coded error body
  (`{"detail": {"error": {"code": ...}}}`, `unreachable_answer`). A task app's own 502 `inference_failed`, 504
  `inference_timeout` or 503 `missing_environment_api_key` is an answer, not an outage.

Everything else is an answer and is never waited for: 4xx contract and auth errors, a 500, a body that is not a
rollout response. A read timeout is not an outage either: the app took the request and is slow, and the caller's
own timeout and retry rules apply.

`TaskAppOutage(url, window_s)` is one app's outage (a window of 0: callers do not wait at all). `begin(why)` notes a request that could not reach it (True
when the caller should say that it now waits); `await wait(should_stop)` probes `GET /health` with backoff (0.5 s,
1 s, 2 s ... 15 s) until any answer comes back (True) or `window_s` seconds have passed since the first failure
(False; `give_up_reason()` says why); `end()` closes the outage once a real request got through (until then a
failure again continues the same window, so an app that answers its health check but nothing else still ends).
With several callers waiting at once (eval's seeds) one probes; `begin` and `tell_back` answer True to one of them,
the one that should say it waits or that the app is back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from synth_ai.env.secrets import redact

DEFAULT_WAIT_S = 300.0
GATEWAY_STATUSES = frozenset({502, 503, 504})
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
PROBE_TIMEOUT_S = 5.0
STOP_POLL_S = 0.25


class WaitStopped(Exception):
    """`should_stop()` answered True during the wait (a cancel, a shutdown)."""


def unreachable_error(exc: BaseException) -> str | None:
    """Why the request that raised `exc` reached nothing; None when `exc` means something else (a read timeout,
    a bad URL)."""
    import httpx

    from synth_ai.loopback_http import LoopbackUnreachable

    outage = (httpx.NetworkError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ProxyError,
              LoopbackUnreachable, ConnectionError)
    if not isinstance(exc, outage):
        return None
    return redact(f"{type(exc).__name__}: {exc}".strip().rstrip(":"))[:300]


def unreachable_answer(status_code: int, text: str) -> str | None:
    """Why an answer is a gateway's stand-in for an app that is not there (502/503/504 without the task app's
    coded error body); None when the app itself answered."""
    if status_code not in GATEWAY_STATUSES or app_error_code(text):
        return None
    return f"HTTP {status_code} from a gateway in front of the task app: {redact(' '.join(text.split()))[:200]!r}"


def app_error_code(text: str) -> str | None:
    """The task app's own error code in a body (`{"detail": {"error": {"code": ...}}}` or `{"error": {...}}`)."""
    import json

    try:
        body = json.loads(text)
    except ValueError:
        return None
    detail = body.get("detail") if isinstance(body, dict) else None
    error = detail.get("error") if isinstance(detail, dict) else body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) and code else None


async def probe_health(client: Any, path: str = "/health") -> str | None:
    """None when the app answers `GET /health` (any answer of its own: a refused key is still the app); else why
    not. `client` is an `httpx.AsyncClient` whose base URL is the app."""
    try:
        response = await client.get(path, timeout=PROBE_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the app did not answer this probe
        return unreachable_error(exc) or redact(f"{type(exc).__name__}: {exc}")[:300]
    return unreachable_answer(response.status_code, response.text)


class TaskAppOutage:
    """One task app's outages (see the module's docstring). `probe` replaces the `GET /health` probe (an async
    callable answering as `probe_health` does); `clock` is for tests."""

    def __init__(self, url: str, window_s: float, *, clock: Callable[[], float] = time.monotonic,
                 probe: Callable[[], Any] | None = None) -> None:
        self.url = url.rstrip("/")
        self.window_s = float(window_s)
        self.clock = clock
        self.probe = probe
        self.since: float | None = None  # the first failure of the current outage
        self.reason: str | None = None  # the latest reason
        self.gave_up = False
        self._answering = False  # the last probe got an answer, and nothing failed since
        self._answered = False  # a probe got an answer at some point of this outage
        self._told = False  # a caller said that the app is back (tell_back)
        self._delays = 0  # backoff steps taken in this outage
        self._lock: asyncio.Lock | None = None

    def begin(self, why: str) -> bool:
        """A request could not reach the app; True when that starts a wait the caller should announce (a new
        outage, or a failure again after the app had answered a probe)."""
        announce = self.since is None or self._answering
        if self.since is None:
            self.since = self.clock()
        self._answering = self._told = False
        self.reason = why
        return announce and not self.gave_up

    def waited_s(self) -> float:
        return 0.0 if self.since is None else max(0.0, self.clock() - self.since)

    def remaining_s(self) -> float:
        return max(0.0, self.window_s - self.waited_s())

    def tell_back(self) -> bool:
        """True for the first caller after a probe found the app back: the one that should say so."""
        told = self._answering and not self._told
        self._told = self._told or told
        return told

    def end(self) -> float | None:
        """A request got through: the outage is over. How long it lasted; None when there was none."""
        if self.since is None:
            return None
        lasted = self.waited_s()
        self.since, self.reason, self.gave_up = None, None, False
        self._answering = self._answered = self._told = False
        self._delays = 0
        return lasted

    def give_up_reason(self, key: str) -> str:
        """What the caller fails with once the window is spent; `key` names the setting that sets it."""
        return (f"the task app at {self.url} could not be reached for {self.waited_s():.0f}s "
                f"(the wait is {key} = {self.window_s:g}): {self.reason or 'no answer'}")

    async def wait(self, should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Probe with backoff until the app answers (True) or the window is spent (False). Raises WaitStopped."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # concurrent callers (eval's seeds) share one prober
            if self.gave_up:
                return False
            if self._answering:
                return True  # another caller's probe saw it back, and nothing failed since
            if self._answered:  # it answered a probe earlier in this outage and failed again: not at once
                await self._sleep(min(self._next_delay(), self.remaining_s()), should_stop)
            if self.probe is not None:
                return await self._probe_until_back(self.probe, should_stop)
            import httpx

            async with httpx.AsyncClient(base_url=self.url, follow_redirects=False) as client:
                return await self._probe_until_back(lambda: probe_health(client), should_stop)

    async def _probe_until_back(self, probe: Callable[[], Any], should_stop: Callable[[], bool]) -> bool:
        while True:
            if should_stop():
                raise WaitStopped()
            if self.remaining_s() <= 0:
                self.gave_up = True
                return False
            why = await probe()
            if why is None:
                self._answering = self._answered = True
                return True
            self.reason = why
            await self._sleep(min(self._next_delay(), self.remaining_s()), should_stop)

    def _next_delay(self) -> float:
        delay = BACKOFF_S[min(self._delays, len(BACKOFF_S) - 1)]
        self._delays += 1
        return delay

    @staticmethod
    async def _sleep(seconds: float, should_stop: Callable[[], bool]) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if should_stop():
                raise WaitStopped()
            await asyncio.sleep(min(STOP_POLL_S, left))
