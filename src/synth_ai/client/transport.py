"""The one HTTP transport every command uses to reach a Synth backend (hosted or embedded).

It owns every transport concern so resources never touch httpx: the `/api` base, `Authorization: Bearer`, finite
timeouts, retries with jittered exponential backoff honouring `Retry-After` / `retry-after-ms`, the
`Idempotency-Key` of a create (the same key on every retry), redaction of secrets in errors, the mapping of
failures to `synth_ai.errors` types, and refusing a reply that no Synth backend would send (another program on the
backend's port; `client/identity.py`).

What is retried: connection failures (the request never left), 408, 429 and 5xx. Read timeouts and dropped
connections after the request was sent are retried only when repeating is safe: GET, a request carrying an
idempotency key, or one its resource marks `repeatable` (a cancel: a second one answers the cancelled
job); a server that accepted the connection and then said nothing until the read timeout gets one more
try, not four. 400, 401, 403, 404, 409, 413 and 422 are never retried.

Deadlines: every phase of every call has a finite timeout (connect 5 s, read/write 60 s, pool 5 s). A command with
its own deadline (`train --poll-timeout`) sets it on the transport (`set_deadline`): each attempt's timeouts and
each backoff are then cut to the time left, and a call that runs out raises `DeadlineError` naming the method and
URL that hung, so retries can never carry a command past its deadline.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from synth_ai import __version__
from synth_ai.client import identity
from synth_ai.env.secrets import redact
from synth_ai.errors import (
    AuthError,
    DeadlineError,
    InvalidInputError,
    NetworkError,
    NotFoundError,
    RateLimitError,
    ServerError,
    SynthError,
    UnavailableError,
)
from synth_ai.urls import join_url

RETRYABLE_STATUS = {408, 429, 500, 502, 503, 504}
SAFE_METHODS = {"GET", "HEAD", "OPTIONS", "DELETE"}


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0  # a server asking to wait longer than this fails fast instead
    max_timeout_retries: int = 1  # a server silent for a whole read timeout is unlikely to answer the 5th time

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter on its upper half: attempt 0 -> 0.25..0.5 s, capped."""
        ceiling = min(self.max_delay, self.base_delay * (2**attempt))
        return ceiling * (0.5 + random.random() / 2)


DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=60.0, write=60.0, pool=5.0)

# Fault-injection seam for tests: when set, every Transport sends through this httpx transport (which may wrap a
# real one). Production code never sets it.
HTTP_TRANSPORT_OVERRIDE: httpx.BaseTransport | None = None


class Transport:
    def __init__(
        self,
        api_base: str,
        api_key: str | None,
        *,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
        http_transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        embedded: bool = False,
    ) -> None:
        self.api_base = api_base.rstrip("/")
        self.origin = self.api_base.removesuffix("/api")  # where the backend's /health is, and what messages name
        self.embedded = embedded  # this machine's backend: its replies are known exactly (client/identity.py)
        self._ours: bool | None = None  # its /health verdict, asked once
        self.api_key = api_key
        self.retry = retry
        self._sleep = sleep
        self._clock = clock
        self._timeout = timeout
        self.deadline: float | None = None  # on `clock`; None: only the per-call timeouts bound a call
        self.deadline_label = ""
        headers = {"User-Agent": f"synth-ai/{__version__}", "Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.Client(base_url=self.api_base, headers=headers, timeout=timeout,
                                  transport=http_transport or HTTP_TRANSPORT_OVERRIDE, follow_redirects=False)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, path: str) -> str:
        return join_url(self.api_base, path)

    def set_deadline(self, seconds: float, label: str) -> None:
        """Bound every later call, retries and backoff included, to `seconds` from now; `label` says whose
        deadline it is in the error (e.g. "--poll-timeout 10 s")."""
        self.deadline = self._clock() + seconds
        self.deadline_label = label

    def time_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - self._clock()

    def _deadline_error(self, method: str, path: str, what: str) -> DeadlineError:
        return DeadlineError(
            f"{method} {self.url(path)} {what}, and the command's deadline ({self.deadline_label}) has passed.",
            hint="Check that the backend runs and answers (`curl <backend>/health`), or raise the deadline. "
                 "Creates carry an idempotency key, so running the same command again does nothing twice.",
            details={"url": self.url(path), "method": method, "deadline": self.deadline_label})

    def _attempt_timeout(self, timeout: httpx.Timeout | None, method: str, path: str) -> httpx.Timeout:
        """This attempt's timeouts: the call's (or the client's), each cut to the time the deadline leaves."""
        base = timeout or self._timeout
        left = self.time_left()
        if left is None:
            return base
        if left <= 0:
            raise self._deadline_error(method, path, "was not sent")
        return httpx.Timeout(connect=_cut(base.connect, left), read=_cut(base.read, left),
                             write=_cut(base.write, left), pool=_cut(base.pool, left))

    def _pause(self, seconds: float, method: str, path: str, what: str) -> None:
        """Back off before a retry, unless the deadline comes first: then stop now with what went wrong."""
        left = self.time_left()
        if left is not None and seconds >= left:
            raise self._deadline_error(method, path, what)
        self._sleep(seconds)

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        body_factory: Callable[[], tuple[Iterable[bytes], dict[str, str]]] | None = None,
        timeout: httpx.Timeout | None = None,
        repeatable: bool = False,
    ) -> httpx.Response:
        """Send with retries; return the successful response or raise a typed error.

        `body_factory` makes a fresh streaming body (and its headers) for each attempt, for uploads. `repeatable`:
        sending it twice does no harm, so a connection lost after sending is retried even without a key.
        """
        method = method.upper()
        headers: dict[str, str] = {}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        can_repeat_after_send = method in SAFE_METHODS or idempotency_key is not None or repeatable
        attempt = timeouts = 0
        while True:
            content = None
            attempt_headers = dict(headers)
            attempt_timeout = self._attempt_timeout(timeout, method, path)
            if body_factory is not None:
                content, extra = body_factory()
                attempt_headers.update(extra)
            try:
                response = self._http.request(method, path, json=json, params=params, content=content,
                                              headers=attempt_headers, timeout=attempt_timeout)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                if attempt < self.retry.max_retries:
                    self._pause(self.retry.backoff(attempt), method, path, f"could not connect ({type(exc).__name__})")
                    attempt += 1
                    continue
                raise NetworkError(
                    f"Cannot reach the backend at {self.api_base} ({type(exc).__name__}).",
                    hint="Check --backend / BACKEND_BASE_URL, or start the embedded backend with "
                         "`synth-ai backend start`.",
                ) from None
            except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:
                what = f"got no answer ({type(exc).__name__} after {_phase_limit(exc, attempt_timeout):.1f} s)"
                left = self.time_left()
                if left is not None and left <= 0.05:
                    raise self._deadline_error(method, path, what) from None
                if can_repeat_after_send and attempt < self.retry.max_retries \
                        and timeouts < self.retry.max_timeout_retries:
                    self._pause(self.retry.backoff(attempt), method, path, what)
                    attempt += 1
                    timeouts += 1
                    continue
                raise DeadlineError(
                    f"{method} {self.url(path)} timed out ({type(exc).__name__}); the server may still have acted.",
                    hint="Retry the same command: creates carry an idempotency key, so nothing is done twice.",
                ) from None
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                if can_repeat_after_send and attempt < self.retry.max_retries:
                    self._pause(self.retry.backoff(attempt), method, path,
                                f"lost its connection ({type(exc).__name__})")
                    attempt += 1
                    continue
                raise NetworkError(f"The connection to {self.api_base} broke during {method} {path} "
                                   f"({type(exc).__name__}).", hint="Retry the command.") from None
            if response.status_code not in RETRYABLE_STATUS:
                self.check_identity(response)
            if response.status_code < 400:
                return response
            if response.status_code in RETRYABLE_STATUS and attempt < self.retry.max_retries:
                wait = retry_after_seconds(response.headers)
                if wait is not None and wait > self.retry.max_retry_after:
                    raise _status_error(method, self.url(path), response,
                                        note=f"the server asked to wait {wait:.0f} s before retrying")
                self._pause(wait if wait is not None else self.retry.backoff(attempt), method, path,
                            f"answered {response.status_code}")
                attempt += 1
                continue
            raise _status_error(method, self.url(path), response)

    def check_identity(self, response: httpx.Response) -> None:
        """Raise NotABackendError when `response` cannot come from a Synth backend (another program answers)."""
        reason = identity.foreign_reply(response)
        if reason is None and self.embedded and identity.lacks_our_error(response):
            if self._ours is None:
                self._ours = identity.says_it_is_ours(self._http, self.origin)
            if not self._ours:
                reason = f"{identity.body_summary(response)}, and its /health is not the synth-ai backend's"
        if reason is not None:
            raise identity.not_a_backend(self.origin, reason, response, embedded=self.embedded)

    def decode(self, response: httpx.Response) -> Any:
        """The JSON body of a successful reply; NotABackendError when no Synth backend would answer with it."""
        body = identity.json_body(response)
        reason = identity.foreign_body(response, body)
        if reason is not None:
            raise identity.not_a_backend(self.origin, reason, response, embedded=self.embedded)
        return body

    def get_json(self, path: str, *, params: Mapping[str, Any] | None = None) -> Any:
        return self.decode(self.request("GET", path, params=params))

    def post_json(self, path: str, body: Any, *, idempotency_key: str | None = None, repeatable: bool = False) -> Any:
        return self.decode(self.request("POST", path, json=body, idempotency_key=idempotency_key,
                                        repeatable=repeatable))

    def stream_lines(self, path: str, *, params: Mapping[str, Any] | None = None,
                     headers: Mapping[str, str] | None = None, read_timeout: float = 60.0,
                     content_type: str = "text/event-stream") -> Iterator[str]:
        """GET a long-lived text stream (server-sent events) and yield its lines. Not retried here: the caller
        reconnects from its own cursor. A reply of another content type is a 415 UnavailableError, like a missing
        route is a NotFoundError."""
        timeout = self._attempt_timeout(httpx.Timeout(connect=DEFAULT_TIMEOUT.connect, read=read_timeout,
                                                      write=DEFAULT_TIMEOUT.write, pool=DEFAULT_TIMEOUT.pool),
                                        "GET", path)
        try:
            with self._http.stream("GET", path, params=params, headers={"Accept": content_type, **(headers or {})},
                                   timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    if response.status_code not in RETRYABLE_STATUS:
                        self.check_identity(response)
                    raise _status_error("GET", self.url(path), response)
                if not response.headers.get("content-type", "").startswith(content_type):
                    raise UnavailableError(f"GET {self.url(path)} answered {response.headers.get('content-type')}, "
                                           f"not {content_type}.", details={"status": 415, "url": self.url(path)})
                yield from response.iter_lines()
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise NetworkError(f"Cannot reach the backend at {self.api_base} ({type(exc).__name__}).") from None
        except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:
            what = f"got no answer ({type(exc).__name__} after {_phase_limit(exc, timeout):.1f} s)"
            left = self.time_left()
            if left is not None and left <= 0.05:
                raise self._deadline_error("GET", path, what) from None
            raise DeadlineError(f"GET {self.url(path)} {what}.") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise NetworkError(f"The stream from {self.api_base} broke ({type(exc).__name__}).") from None


    @contextmanager
    def download(self, path: str, *, offset: int = 0) -> Iterator[tuple[httpx.Response, Iterator[bytes]]]:
        """GET a file as a byte stream from `offset` (`Range: bytes=N-`; the reply's 206 or 200 says whether the
        server skipped ahead). Not retried here: a broken stream is a NetworkError, and the caller resumes from
        the bytes it has."""
        headers = {"Accept": "application/octet-stream", **({"Range": f"bytes={offset}-"} if offset else {})}
        try:
            with self._http.stream("GET", path, headers=headers,
                                   timeout=self._attempt_timeout(None, "GET", path)) as response:
                if response.status_code >= 400:
                    response.read()
                    self.check_identity(response)
                    raise _status_error("GET", self.url(path), response)
                yield response, response.iter_bytes()
        except (httpx.TransportError, httpx.StreamError) as exc:
            raise NetworkError(f"The download of {self.url(path)} broke ({type(exc).__name__}).",
                               details={"url": self.url(path)}) from None

def _cut(limit: float | None, left: float) -> float:
    return max(0.01, left if limit is None else min(limit, left))


def _phase_limit(exc: Exception, timeout: httpx.Timeout) -> float:
    limit = timeout.write if isinstance(exc, httpx.WriteTimeout) else timeout.read
    return float(limit) if limit is not None else 0.0


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, `Retry-After` seconds or an HTTP date."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):  # neither seconds nor a date: ignore it and back off as usual
        return None
    return max(0.0, parsed.timestamp() - time.time())


def server_detail(response: httpx.Response) -> Any:
    """The error the server explained, as JSON when it sent JSON."""
    try:
        body = response.json()
    except ValueError:  # a proxy's or another program's page: say what it was, never print it
        return f"a {identity.body_summary(response)} reply that is not JSON"
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"]  # ours: {"detail": message, "error": {code, message, hint?, details?}}
    if isinstance(body, dict) and "detail" in body:
        body = body["detail"]
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]  # a task app's {"detail": {"error": {...}}}
    return body


def _detail_text(detail: Any) -> str:
    if isinstance(detail, dict):
        return str(detail.get("message") or detail.get("detail") or detail)
    if isinstance(detail, list):  # FastAPI validation errors
        return "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail[:5])
    return str(detail)


def _status_error(method: str, url: str, response: httpx.Response, *, note: str | None = None):
    status = response.status_code
    detail = server_detail(response)
    text = redact(_detail_text(detail))
    where = f"{method} {url} -> {status}"
    details = {"status": status, "url": url, "detail": detail}
    if status in (401, 403):
        return AuthError(f"The backend refused the API key ({where}): {text}",
                         hint="Check SYNTH_API_KEY (run `synth-ai setup`, or `synth-ai setup --local` for the "
                              "embedded backend).", details=details)
    if status == 404:
        return NotFoundError(f"Not found ({where}): {text}", details=details)
    if status == 501:
        return UnavailableError(f"Not available on this backend ({where}): {text}", details=details)
    if status == 429:
        return RateLimitError(f"Rate limited ({where}){': ' + note if note else ''}.",
                              hint="Wait and run the same command again.", details=details)
    if status >= 500 or status == 408:
        return ServerError(f"The backend failed ({where}){': ' + note if note else ''}: {text}",
                           hint="Retry later; if it persists, check the backend's log.", details=details)
    hint = redact(str(detail["hint"])) if isinstance(detail, dict) and detail.get("hint") else None
    error_type = _ERRORS_BY_CODE.get(str(detail.get("code", ""))) if isinstance(detail, dict) else None
    return (error_type or InvalidInputError)(f"The backend rejected the request ({where}): {text}", hint=hint,
                                             details=details)


# 4xx codes whose cause is not the request's shape: a key the task app refuses is an auth problem (exit 4), a task
# app nobody can reach a network one (exit 5). Codes from `synth_ai.backend.api.taskapp_probe`.
_ERRORS_BY_CODE: dict[str, type[SynthError]] = {
    "missing_environment_api_key": AuthError, "task_app_auth_failed": AuthError, "task_app_has_no_key": AuthError,
    "task_app_unreachable": NetworkError,
}
