"""Telling a Synth backend's reply from another server's, for the transport (`client/transport.py`).

Port 8000 is the default of many development servers, so the URL of a backend may well answer with someone
else's server. A Synth backend answers every `/api` call with JSON, and every error as an object with `detail`
(ours adds an `error` object). Any other reply means the URL is not a Synth backend: the command says so in one
line (exit 5) and never prints the other server's page.

The transport does not ask about replies it retries (408, 429, 5xx: a busy or failing backend, or the proxy in
front of one), and the shape of a successful reply is judged only as far as "a JSON object or array".

For this machine's embedded backend the test is stricter, as its replies are known exactly: an error without the
`error` object (what any FastAPI app answers, `{"detail": "Not Found"}`) is checked against its `GET /health`,
which says `"service": "synth-ai-backend"`.
"""

from __future__ import annotations

from typing import Any

import httpx

from synth_ai.errors import ExitCode, SynthError

SERVICE_NAME = "synth-ai-backend"  # what the embedded backend's /health says it is
PROBE_TIMEOUT = httpx.Timeout(3.0)
_NOT_JSON = object()


class NotABackendError(SynthError):
    """The backend URL answers, but with another program: exit 5, as for a backend that cannot be reached, but
    never retried (another program does not turn into a backend) and never taken for an answer."""

    exit_code = ExitCode.NETWORK
    code = "not_a_backend"


def content_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "").split(";")[0].strip().lower()


def is_json_type(ctype: str) -> bool:
    return ctype == "application/json" or ctype.endswith("+json")


def body_summary(response: httpx.Response) -> str:
    """What a reply was, without its text: `text/html 404`."""
    return f"{content_type(response) or 'no content type'} {response.status_code}"


def foreign_reply(response: httpx.Response) -> str | None:
    """Why this reply cannot come from a Synth backend (`text/html 404`, ...), or None when it may. Error bodies are
    read here; a successful one only by `foreign_body`, when its caller decodes it."""
    if not is_json_type(content_type(response)):
        return body_summary(response)
    if response.status_code < 400:
        return None
    body = json_body(response)
    if body is _NOT_JSON:
        return f"{body_summary(response)} whose body is not JSON"
    if not (isinstance(body, dict) and ("detail" in body or isinstance(body.get("error"), dict))):
        return f"{body_summary(response)} without a Synth error body"
    return None


def foreign_body(response: httpx.Response, body: Any) -> str | None:
    """Why a decoded successful body cannot be a Synth backend's (every one is an object or an array), or None."""
    if body is _NOT_JSON:
        return f"{body_summary(response)} whose body is not JSON"
    if not isinstance(body, (dict, list)):
        return f"{body_summary(response)} whose body is a bare {type(body).__name__}"
    return None


def lacks_our_error(response: httpx.Response) -> bool:
    """An error reply without the `error` object every error of the embedded backend carries."""
    body = json_body(response)
    return response.status_code >= 400 and not (isinstance(body, dict) and isinstance(body.get("error"), dict))


def says_it_is_ours(http: httpx.Client, origin: str) -> bool:
    """Whether `<origin>/health` answers as the embedded backend does (one quick try, without the API key: the
    program being asked may not be ours)."""
    request = http.build_request("GET", f"{origin}/health", timeout=PROBE_TIMEOUT)
    request.headers.pop("Authorization", None)
    try:
        response = http.send(request)
    except httpx.HTTPError:
        return False
    body = json_body(response) if is_json_type(content_type(response)) else None
    return response.status_code == 200 and isinstance(body, dict) and body.get("service") == SERVICE_NAME


def not_a_backend(origin: str, reason: str, response: httpx.Response, *, embedded: bool) -> NotABackendError:
    fix = "Point --backend (or BACKEND_BASE_URL) at a Synth backend"
    if embedded:
        fix += (", or start this machine's backend with `synth-ai backend start`: when another program holds "
                "its port it takes a free one, and every command finds it there")
    return NotABackendError(f"{origin} answers but is not a Synth backend ({reason}).", hint=f"{fix}.",
                            details={"url": str(response.request.url), "method": response.request.method,
                                     "reply": reason})


def json_body(response: httpx.Response) -> Any:
    """The JSON body, or a marker `foreign_body` recognises when there is none."""
    try:
        return response.json()
    except ValueError:
        return _NOT_JSON
