"""What can go wrong calling a task app, as types: the one classification the RL trainer, `eval`, `task-app
validate` and the backend's probe share (`synth_ai.taskapp.client` raises them).

| type                     | `kind`        | meaning                                                              |
|--------------------------|---------------|----------------------------------------------------------------------|
| `TaskAppTimeout`         | `timeout`     | the app took the request and did not answer in time                  |
| `TaskAppUnreachable`     | `unreachable` | nothing took it, or a gateway answered for an app that is not there  |
| `TaskAppTransportError`  | `transport`   | the request failed some other way (a protocol or decoding error)     |
| `TaskAppHTTPError`       | `http`        | the app answered with a status of 400 or more                        |
| `TaskAppInvalidResponse` | `invalid`     | a 2xx answer that is not what the contract says (`field` names where) |

"Unreachable" is the rule of `synth_ai.taskapp.reachability`. Messages and excerpts are masked (`redact`): a task
app's error body may echo a key.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from synth_ai.env.secrets import redact
from synth_ai.taskapp.reachability import app_error_code

EXCERPT_CHARS = 300
AUTH_CODES = ("unauthorised", "unauthorized")


class TaskAppFailure(Exception):
    """A call to a task app that did not give a usable answer. `reason` is the masked detail; `url` the route."""

    kind: ClassVar[str] = "failure"

    def __init__(self, reason: str, *, url: str = "") -> None:
        self.reason = redact(reason)
        self.url = url
        super().__init__(self.reason)


class TaskAppTimeout(TaskAppFailure):
    kind = "timeout"

    def __init__(self, reason: str, *, url: str = "", timeout_s: float | None = None) -> None:
        super().__init__(reason, url=url)
        self.timeout_s = timeout_s


class TaskAppUnreachable(TaskAppFailure):
    """`status_code` (and the body, `text`) are set when a gateway answered in the app's place (502/503/504 without
    the app's coded body)."""

    kind = "unreachable"

    def __init__(self, reason: str, *, url: str = "", status_code: int | None = None, text: str = "") -> None:
        super().__init__(reason, url=url)
        self.status_code = status_code
        self.text = text


class TaskAppTransportError(TaskAppFailure):
    kind = "transport"


class TaskAppHTTPError(TaskAppFailure):
    """The app's own answer with a status of 400 or more. `text` is its body (use `excerpt` or `detail` to show)."""

    kind = "http"

    def __init__(self, status_code: int, text: str, *, url: str = "") -> None:
        self.status_code = status_code
        self.text = text
        super().__init__(f"HTTP {status_code}: {text[:EXCERPT_CHARS]}", url=url)

    @property
    def excerpt(self) -> str:
        """The start of the body, masked."""
        return redact(self.text[:EXCERPT_CHARS])

    @property
    def body(self) -> Any:
        try:
            return json.loads(self.text)
        except ValueError:
            return None

    @property
    def error_code(self) -> str | None:
        """The app's error code (`{"detail": {"error": {"code": ...}}}`), when it sent one."""
        return app_error_code(self.text)

    @property
    def error_message(self) -> str | None:
        """The app's own error message (`detail.error.message`), when it sent one, masked."""
        detail = self.body.get("detail") if isinstance(self.body, dict) else None
        error = detail.get("error") if isinstance(detail, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        return redact(str(message)) if message else None

    @property
    def detail(self) -> str:
        """What the app said: `code: message` when it sent a coded error, else its `detail`, else the body; masked."""
        body = self.body
        detail = body.get("detail") if isinstance(body, dict) else None
        error = detail.get("error") if isinstance(detail, dict) else None
        if isinstance(error, dict) and error.get("message"):
            text = f"{error.get('code', 'error')}: {error['message']}"
        elif detail is not None:
            text = detail if isinstance(detail, str) else str(detail)
        else:
            text = self.text or "(empty body)"
        return redact(text)

    @property
    def auth_refused(self) -> bool:
        """401/403, or the reference's 400 with the error code `unauthorised`: the key was refused."""
        return self.status_code in (401, 403) or (self.status_code == 400 and self.error_code in AUTH_CODES)


class TaskAppInvalidResponse(TaskAppFailure):
    """A 2xx answer that does not match the contract; `field` is the path of the first mismatch (`(root)` for the
    whole body)."""

    kind = "invalid"

    def __init__(self, reason: str, *, field: str, url: str = "", status_code: int | None = None) -> None:
        super().__init__(reason, url=url)
        self.field = field
        self.status_code = status_code


__all__ = [
    "TaskAppFailure",
    "TaskAppHTTPError",
    "TaskAppInvalidResponse",
    "TaskAppTimeout",
    "TaskAppTransportError",
    "TaskAppUnreachable",
]
