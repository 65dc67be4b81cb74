"""Checking a running task app: reachable, key accepted, routes present, answers in the contract's shapes.

Used by `synth-ai task-app validate|info`, the embedded backend's `/rl/verify_task_app` and the train client's
pre-flight. Every check returns a `CheckResult` whose `kind` tells failures apart:

| kind            | meaning                                                        | exit code     |
|-----------------|----------------------------------------------------------------|---------------|
| `ok`            | passed                                                         | 0             |
| `unreachable`   | no connection (refused, DNS, TLS)                              | NETWORK (5)   |
| `timeout`       | no answer within the timeout (per seed for task instances)     | TIMEOUT (7)   |
| `auth`          | key rejected (400/401/403), or the app has no key configured   | AUTH (4)      |
| `missing_route` | 404/405 for a route the contract requires                      | NOT_FOUND (8) |
| `schema`        | an answer that does not match the contract (field named)       | INVALID_INPUT (3) |
| `server_error`  | any other non-2xx answer                                       | SERVER (9)    |

Async functions (`acheck_health`, `averify_task_app`, …) take an optional `httpx.AsyncClient` (an ASGI transport
checks an app in process); the plain names run them to completion for synchronous callers.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from dataclasses import field as dc_field
from typing import Any

from synth_ai.env.secrets import redact
from synth_ai.errors import ExitCode
from synth_ai.taskapp.auth import auth_headers
from synth_ai.taskapp.client import TaskAppAnswer, TaskAppClient
from synth_ai.taskapp.contracts import RolloutMode, RolloutRequest
from synth_ai.taskapp.failures import (
    EXCERPT_CHARS,
    TaskAppHTTPError,
    TaskAppInvalidResponse,
    TaskAppTimeout,
    TaskAppTransportError,
    TaskAppUnreachable,
)
from synth_ai.urls import join_url

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_ROLLOUT_TIMEOUT_S = 180.0

KIND_EXIT_CODES: dict[str, ExitCode] = {
    "ok": ExitCode.OK,
    "unreachable": ExitCode.NETWORK,
    "timeout": ExitCode.TIMEOUT,
    "auth": ExitCode.AUTH,
    "missing_route": ExitCode.NOT_FOUND,
    "schema": ExitCode.INVALID_INPUT,
    "server_error": ExitCode.SERVER,
}


@dataclass
class CheckResult:
    name: str
    ok: bool
    kind: str
    message: str
    url: str | None = None
    status_code: int | None = None
    elapsed_ms: int | None = None
    field: str | None = None
    warnings: list[str] = dc_field(default_factory=list)
    data: Any = None

    @property
    def exit_code(self) -> ExitCode:
        return KIND_EXIT_CODES.get(self.kind, ExitCode.INTERNAL)

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("data", None)
        return {k: v for k, v in doc.items() if v not in (None, [])}


HealthReport = CheckResult


@dataclass
class VerifyReport:
    base_url: str
    checks: list[CheckResult]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def exit_code(self) -> ExitCode:
        for check in self.checks:
            if not check.ok:
                return check.exit_code
        return ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "ok": self.ok, "exit_code": int(self.exit_code),
                "checks": [c.to_dict() for c in self.checks]}


def _headers(api_key: str | None, aliases: Sequence[str] = ()) -> dict[str, str]:
    return auth_headers(api_key, aliases) if api_key else {}


def _body(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _http_failure(name: str, url: str, exc: TaskAppHTTPError, elapsed: int) -> CheckResult:
    status, code = exc.status_code, exc.error_code
    if status == 503 and code == "missing_environment_api_key":
        return CheckResult(name, False, "auth", "The task app has no ENVIRONMENT_API_KEY configured "
                           "(503 missing_environment_api_key); set it where the app runs.",
                           url=url, status_code=status, elapsed_ms=elapsed)
    if exc.auth_refused:
        return CheckResult(name, False, "auth", f"The task app rejected the API key (HTTP {status}"
                           f"{' ' + code if code else ''}). Check ENVIRONMENT_API_KEY or --api-key.",
                           url=url, status_code=status, elapsed_ms=elapsed)
    if status in (404, 405):
        return CheckResult(name, False, "missing_route", f"{url} is not a route of this task app (HTTP {status}).",
                           url=url, status_code=status, elapsed_ms=elapsed)
    message = exc.error_message if status >= 500 else None  # the app's own words, where it sent them
    return CheckResult(name, False, "server_error", f"{url} answered HTTP {status}: {message or exc.excerpt}",
                       url=url, status_code=status, elapsed_ms=elapsed)


def _schema_failure(name: str, url: str, exc: TaskAppInvalidResponse, elapsed: int | None = None) -> CheckResult:
    return CheckResult(name, False, "schema", f"{url}: {exc.reason}", url=url, status_code=exc.status_code,
                       elapsed_ms=elapsed, field=exc.field)


def _ok(name: str, url: str, response: Any, message: str, data: Any = None,
        warnings: list[str] | None = None) -> CheckResult:
    return CheckResult(name, True, "ok", message, url=url, status_code=response.status_code,
                       elapsed_ms=getattr(response, "elapsed_ms", None), data=data, warnings=warnings or [])


class _Client:
    """An AsyncClient we own (closed on exit) or the caller's (left open)."""

    def __init__(self, client: Any) -> None:
        self._given = client
        self._own: Any = None

    async def __aenter__(self) -> Any:
        if self._given is not None:
            return self._given
        import httpx

        self._own = httpx.AsyncClient()
        return self._own

    async def __aexit__(self, *exc: object) -> None:
        if self._own is not None:
            await self._own.aclose()


async def _call(name: str, client: Any, base_url: str, path: str, send: Callable[[TaskAppClient], Awaitable[Any]],
                *, headers: dict[str, str], accept: tuple[int, ...] = ()) -> tuple[CheckResult | None, Any]:
    """One call through the task-app client, its typed failures as a check's kinds; statuses in `accept` are
    answers, not failures. Returns (failure, None) or (None, the answer)."""
    url = join_url(base_url, path)
    started = time.perf_counter()

    def elapsed() -> int:
        return int((time.perf_counter() - started) * 1000)

    try:
        async with _Client(client) as http:
            return None, await send(TaskAppClient(base_url, headers=headers, http=http))
    except TaskAppHTTPError as exc:
        if exc.status_code in accept:
            return None, TaskAppAnswer(exc.status_code, exc.text, elapsed(), url)
        return _http_failure(name, url, exc, elapsed()), None
    except TaskAppTimeout as exc:
        return CheckResult(name, False, "timeout", exc.reason, url=url, elapsed_ms=elapsed()), None
    except TaskAppUnreachable as exc:
        if exc.status_code is not None:  # a gateway answered: reported as the answer it was, as before
            return CheckResult(name, False, "server_error",
                               f"{url} answered HTTP {exc.status_code}: {redact(exc.text[:EXCERPT_CHARS])}",
                               url=url, status_code=exc.status_code, elapsed_ms=elapsed()), None
        return CheckResult(name, False, "unreachable", f"Could not reach {url}: {exc.reason}", url=url), None
    except TaskAppInvalidResponse as exc:
        return _schema_failure(name, url, exc, elapsed()), None
    except TaskAppTransportError as exc:
        return CheckResult(name, False, "unreachable", f"Could not reach {url}: {exc.reason}", url=url), None


def _get(path: str, timeout: float, params: Any = None) -> Callable[[TaskAppClient], Awaitable[Any]]:
    return lambda app: app.get(path, params=params, timeout_s=timeout)


async def acheck_root(base_url: str, *, timeout: float = DEFAULT_TIMEOUT_S, client: Any = None) -> CheckResult:
    url = join_url(base_url, "/")
    failure, response = await _call("root", client, base_url, "/", _get("/", timeout), headers={})
    if failure:
        return failure
    body = _body(response)
    if not isinstance(body, dict) or body.get("status") != "ok":
        return CheckResult("root", False, "schema", f"{url}: expected {{\"status\": \"ok\", ...}}, got "
                           f"{response.text[:200]!r}", url=url, status_code=response.status_code, field="status")
    return _ok("root", url, response, f"service {body.get('service')!r} is up", data=body)


async def acheck_health(base_url: str, api_key: str | None, *, timeout: float = DEFAULT_TIMEOUT_S,
                        aliases: Sequence[str] = (), client: Any = None) -> HealthReport:
    url = join_url(base_url, "/health")
    failure, response = await _call("health", client, base_url, "/health", _get("/health", timeout),
                                    headers=_headers(api_key, aliases))
    if failure:
        return failure
    body = _body(response)
    if not isinstance(body, dict) or "healthy" not in body:
        return CheckResult("health", False, "schema", f"{url}: expected a JSON object with 'healthy'",
                           url=url, status_code=response.status_code, field="healthy")
    if body.get("healthy") is not True:
        return CheckResult("health", False, "server_error", f"{url}: the app reports healthy={body.get('healthy')}",
                           url=url, status_code=response.status_code, field="healthy", data=body)
    return _ok("health", url, response, "healthy, key accepted", data=body)


async def acheck_info(base_url: str, api_key: str | None, *, timeout: float = DEFAULT_TIMEOUT_S,
                      aliases: Sequence[str] = (), client: Any = None) -> CheckResult:
    url = join_url(base_url, "/info")
    failure, response = await _call("info", client, base_url, "/info", _get("/info", timeout),
                                    headers=_headers(api_key, aliases))
    if failure:
        return failure
    body = _body(response)
    service = body.get("service") if isinstance(body, dict) else None
    if not isinstance(service, dict):
        return CheckResult("info", False, "schema", f"{url}: field 'service' is missing or not an object",
                           url=url, status_code=response.status_code, field="service")
    if not isinstance(service.get("task"), dict):
        return CheckResult("info", False, "schema", f"{url}: field 'service.task' is missing or not an object",
                           url=url, status_code=response.status_code, field="service.task")
    return _ok("info", url, response, f"task {service['task'].get('id')!r}", data=body)


async def acheck_task_info(base_url: str, api_key: str | None, *, seeds: Sequence[int] = (),
                           min_instances: int = 0, timeout: float = DEFAULT_TIMEOUT_S, aliases: Sequence[str] = (),
                           client: Any = None) -> CheckResult:
    """`/task_info` without seeds must give `{"taskset": …}`; with seeds, `TaskInfo` objects (one object for
    one seed, else a list) — at least `min_instances` of them."""
    from pydantic import TypeAdapter, ValidationError

    from synth_ai.taskapp.client import invalid_from
    from synth_ai.taskapp.contracts import TaskInfo

    name = "task_instances" if seeds else "task_info"
    url = join_url(base_url, "/task_info")
    params = [("seeds", str(s)) for s in seeds] or None
    # an app may build each instance on request (0.2.17's crafter: a world per seed, ~1.3 s): `timeout` per seed
    budget = timeout * max(1, len(seeds))
    failure, response = await _call(name, client, base_url, "/task_info", _get("/task_info", budget, params),
                                    headers=_headers(api_key, aliases))
    if failure:
        if failure.kind == "timeout" and seeds:
            failure.message = (f"GET {url} did not answer within {budget:g}s, the time allowed for the "
                               f"{len(seeds)} task instance(s) it was asked for (seeds {_span(seeds)}, "
                               f"{timeout:g}s each)")
        return failure
    body = _body(response)
    if not seeds:
        if not isinstance(body, dict) or "taskset" not in body:
            return CheckResult(name, False, "schema", f"{url}: field 'taskset' is missing", url=url,
                               status_code=response.status_code, field="taskset")
        return _ok(name, url, response, "taskset described", data=body)
    items = body if isinstance(body, list) else [body]
    try:
        TypeAdapter(list[TaskInfo]).validate_python(items)
    except ValidationError as exc:
        return _schema_failure(name, url, invalid_from(exc, url=url, status_code=response.status_code),
                               response.elapsed_ms)
    if len(items) < min_instances:
        return CheckResult(name, False, "schema", f"{url}: {len(items)} task instances for {len(seeds)} seeds, "
                           f"fewer than the {min_instances} required", url=url, status_code=response.status_code)
    return _ok(name, url, response, f"{len(items)} task instance(s) for seeds {list(seeds)}", data=body)


def _span(seeds: Sequence[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if list(seeds) == list(range(seeds[0], seeds[-1] + 1)) else \
        ", ".join(str(s) for s in seeds)


def rollout_request(*, run_id: str, seed: int, inference_url: str, model: str,
                    mode: RolloutMode = "eval") -> RolloutRequest:
    """The verifier's one-turn rollout (policy `verify`, no trace asked for)."""
    return RolloutRequest.model_validate({
        "run_id": run_id, "env": {"seed": seed, "config": {}},
        "policy": {"policy_name": "verify", "config": {"model": model, "inference_url": inference_url}},
        "ops": ["agent", "env"], "mode": mode, "record": {"return_trace": False}})


async def acheck_rollout(base_url: str, api_key: str | None, *, inference_url: str | None = None,
                         model: str | None = None, seed: int = 0, timeout: float = DEFAULT_TIMEOUT_S,
                         rollout_timeout: float = DEFAULT_ROLLOUT_TIMEOUT_S, aliases: Sequence[str] = (),
                         client: Any = None) -> CheckResult:
    """Without a model: `/rollout` must exist and reject a request with no `mode` (422). With `inference_url` and
    `model`: one real rollout, validated against `RolloutResponse`, with the RL trainer's expectations reported
    as warnings (a `?cid=` is added to the inference URL to check it comes back)."""
    from synth_ai.taskapp.contracts import rl_response_problems
    from synth_ai.taskapp.inference import with_cid

    url = join_url(base_url, "/rollout")
    headers = _headers(api_key, aliases)
    if not (inference_url and model):
        probe = {"run_id": "verify-probe", "env": {}, "policy": {}, "ops": []}  # no `mode`: must be refused
        failure, response = await _call("rollout", client, base_url, "/rollout",
                                        lambda app: app.post_json("/rollout", probe, timeout_s=timeout),
                                        headers=headers, accept=(422,))
        if failure:
            return failure
        if response.status_code == 422:
            return _ok("rollout", url, response, "route present and validates requests (pass --inference-url "
                       "and --model for a real rollout)")
        return CheckResult("rollout", False, "schema", f"{url} accepted a request without 'mode' (HTTP "
                           f"{response.status_code}); the contract requires it", url=url,
                           status_code=response.status_code, field="mode")
    cid = f"verify-{uuid.uuid4().hex[:12]}"
    request = rollout_request(run_id=cid, seed=seed, inference_url=with_cid(inference_url, cid), model=model)
    failure, answer = await _call("rollout", client, base_url, "/rollout",
                                  lambda app: app.rollout(request, timeout_s=rollout_timeout), headers=headers)
    if failure:
        return failure
    try:
        parsed = answer.validated()
    except TaskAppInvalidResponse as exc:
        return _schema_failure("rollout", url, exc, answer.elapsed_ms)
    steps = sum(len(t.steps) for t in parsed.trajectories)
    reward = parsed.metrics.mean_return
    return _ok("rollout", url, answer, f"rollout ran: {steps} step(s), mean return {reward:g}", data=answer.doc,
               warnings=rl_response_problems(parsed))


async def averify_task_app(base_url: str, api_key: str | None, *, timeout: float = DEFAULT_TIMEOUT_S,
                           min_instances: int = 1, aliases: Sequence[str] = (), inference_url: str | None = None,
                           model: str | None = None, seed: int = 0,
                           rollout_timeout: float = DEFAULT_ROLLOUT_TIMEOUT_S, client: Any = None) -> VerifyReport:
    async with _Client(client) as http:
        checks = [await acheck_root(base_url, timeout=timeout, client=http)]
        if checks[0].kind in ("unreachable",):
            return VerifyReport(base_url, checks)
        kw = {"timeout": timeout, "aliases": aliases, "client": http}
        checks.append(await acheck_health(base_url, api_key, **kw))
        checks.append(await acheck_info(base_url, api_key, **kw))
        checks.append(await acheck_task_info(base_url, api_key, **kw))
        count = max(1, min_instances)
        checks.append(await acheck_task_info(base_url, api_key, seeds=list(range(count)),
                                             min_instances=min_instances, **kw))
        checks.append(await acheck_rollout(base_url, api_key, inference_url=inference_url, model=model, seed=seed,
                                           rollout_timeout=rollout_timeout, **kw))
    return VerifyReport(base_url, checks)


def _run(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError("called from a running event loop; await the a-prefixed variant instead")


def check_health(base_url: str, api_key: str | None, *, timeout: float = DEFAULT_TIMEOUT_S,
                 aliases: Sequence[str] = ()) -> HealthReport:
    return _run(acheck_health(base_url, api_key, timeout=timeout, aliases=aliases))


def check_task_info(base_url: str, api_key: str | None, *, seeds: Sequence[int] = (), min_instances: int = 0,
                    timeout: float = DEFAULT_TIMEOUT_S, aliases: Sequence[str] = ()) -> CheckResult:
    return _run(acheck_task_info(base_url, api_key, seeds=seeds, min_instances=min_instances, timeout=timeout,
                                 aliases=aliases))


def verify_task_app(base_url: str, api_key: str | None, **kwargs: Any) -> VerifyReport:
    return _run(averify_task_app(base_url, api_key, **kwargs))
