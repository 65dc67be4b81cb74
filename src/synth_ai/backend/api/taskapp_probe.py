"""Calling a task app from the backend with the ENVIRONMENT_API_KEYs it knows: the pieces `verify_task_app` reports
with, and the create-time probe of `POST /api/rl/jobs`, which refuses a job whose task app the worker could not
call (no key, every key refused, nothing listening) instead of letting it fail minutes later.

Reports show keys masked and never a task app's echo of them; requests never follow redirects (they would carry
the keys to whatever host the task app names).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from synth_ai.backend.http_errors import ApiError
from synth_ai.env.backend_keys import KnownKey
from synth_ai.env.secrets import redact
from synth_ai.taskapp.client import TaskAppClient, run_sync
from synth_ai.taskapp.failures import TaskAppFailure, TaskAppHTTPError, TaskAppUnreachable
from synth_ai.taskapp.reachability import app_error_code
from synth_ai.urls import join_url

PROBE_TIMEOUT_S = 10.0
HEADER_STYLES = ("X-API-Key", "X-API-Keys", "Authorization")
SHORT_FIX = " Fix: `synth-ai setup --local`, or start the app with `synth-ai serve` (it shares its key)."
FIX_HINT = ("Give the backend the task app's key: `synth-ai setup --local` (registers the key in your .env with the "
            "embedded backend), or start the task app with `synth-ai serve` / `synth-ai deploy` (they upload it "
            "sealed), or run `synth-ai train --env-file <.env with ENVIRONMENT_API_KEY=...>` (train uploads it).")


def auth_headers(style: str, key: str, all_keys: list[str]) -> dict[str, str]:
    if style == "X-API-Key":
        return {"X-API-Key": key}
    if style == "X-API-Keys":
        return {"X-API-Keys": ",".join([key, *[k for k in all_keys if k != key]])}
    return {"Authorization": f"Bearer {key}"}


def snippet(text: str, keys: list[str]) -> Any:
    """The start of a task app's answer, for a report; key fragments in it (a 0.2.17 app's `allowed_first15`,
    `got_first15`, `expected_prefix`) are hidden, and any whole key the backend knows is masked."""
    try:
        body = without_key_fragments(json.loads(text))
    except ValueError:
        return redact(text[:300], keys)
    shown = redact(str(body), keys)
    return body if len(shown) <= 600 and shown == str(body) else shown[:600]


def without_key_fragments(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "<hidden>" if ("first15" in str(k) or "prefix" in str(k)) else without_key_fragments(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [without_key_fragments(v) for v in value]
    return value


def health_ok(status_code: int, text: str) -> bool:
    """200, or 401/403 that names the expected key prefix (the reference treats that as auth-optional)."""
    if status_code == 200:
        return True
    if status_code in (401, 403):
        try:
            body = json.loads(text)
        except ValueError:
            return False
        shown = str(body).lower()
        return "expected_api_key_prefix" in shown or "expected prefix" in shown
    return False


async def get_answer(app: TaskAppClient, path: str, headers: dict[str, str],
                     timeout: float) -> tuple[int, str] | TaskAppFailure:
    """(status, body) of a GET whatever the status (a gateway's in the app's place included); the failure when
    nothing answered."""
    try:
        answer = await app.get(path, headers=headers, timeout_s=timeout)
    except (TaskAppHTTPError, TaskAppUnreachable) as exc:
        return exc if exc.status_code is None else (exc.status_code, exc.text)
    except TaskAppFailure as exc:
        return exc
    return answer.status_code, answer.text


@dataclass
class ProbeResult:
    key: KnownKey | None  # the first key the task app accepted
    attempts: list[dict[str, Any]] = field(default_factory=list)


def require_usable_task_app(base_url: str, known: list[KnownKey], *, timeout: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """GET `<task app>/health` with each known key (as `X-API-Key`, the header the RL worker sends) until one is
    accepted; otherwise raise the 4xx that says which keys were tried (masked) and how to give the backend one."""
    base = base_url.rstrip("/")
    if not known:
        raise ApiError(400, "missing_environment_api_key",
                       f"This backend knows no ENVIRONMENT_API_KEY, so its RL worker could not call the task app at "
                       f"{base}." + SHORT_FIX, hint=FIX_HINT, details={"task_url": base, "keys_tried": []})
    return run_sync(_probe(base, known, timeout))


async def _probe(base: str, known: list[KnownKey], timeout: float) -> ProbeResult:
    values = [k.value for k in known]
    result = ProbeResult(None)
    async with TaskAppClient(base) as app:
        for candidate in known:
            attempt: dict[str, Any] = {"url": join_url(base, "health"), "key": candidate.describe()}
            result.attempts.append(attempt)
            answer = await get_answer(app, "/health", {"X-API-Key": candidate.value}, timeout)
            if isinstance(answer, TaskAppFailure):
                raise ApiError(400, "task_app_unreachable",
                               f"The task app at {base} cannot be reached from the backend "
                               f"({redact(answer.reason, values) or 'no answer'}).",
                               hint="Start it (`synth-ai serve <app id>`) or fix --task-url / TASK_APP_URL / "
                                    "[services].task_url; the URL must be reachable from the backend's machine.",
                               details={"task_url": base})
            status, text = answer
            attempt["status"] = status
            if health_ok(status, text):
                result.key = candidate
                return result
            if status == 503 and app_error_code(text) == "missing_environment_api_key":
                raise ApiError(400, "task_app_has_no_key",
                               f"The task app at {base} has no ENVIRONMENT_API_KEY configured, so it refuses every "
                               "caller.", hint="Start the task app with ENVIRONMENT_API_KEY set (`synth-ai serve` "
                               "reads it from your .env; `synth-ai setup --local` writes one).",
                               details={"task_url": base, "answer": snippet(text, values)})
            if status not in (400, 401, 403):
                raise ApiError(400, "task_app_unhealthy",
                               f"The task app at {base} answered GET /health with {status}.",
                               hint=f"Check that {base} is a synth-ai task app and that it is healthy "
                                    f"(`synth-ai task-app validate --url {base}`).",
                               details={"task_url": base, "answer": snippet(text, values)})
            attempt["answer"] = snippet(text, values)
    tried = [k.describe() for k in known]
    raise ApiError(400, "task_app_auth_failed",
                   f"The task app at {base} refused every ENVIRONMENT_API_KEY this backend knows "
                   f"(tried: {', '.join(tried)})." + SHORT_FIX, hint=FIX_HINT,
                   details={"task_url": base, "keys_tried": tried, "attempts": result.attempts})
