"""Errors a task app raises while serving a request, and the ones the task-app tooling raises to a user.

`TaskAppError` and its subclasses become JSON error bodies in the reference's shape
(`{"detail": {"error": {"code", "message", ...extra}}}`) with their HTTP status. `TaskAppNotFoundError` is a
user-facing `SynthError` rendered by the CLI's error boundary.
"""

from __future__ import annotations

from typing import Any

from synth_ai.errors import NotFoundError


class TaskAppError(Exception):
    """An error answered to the task app's caller with `status_code` and a coded body."""

    status_code: int = 500
    code: str = "task_app_error"

    def __init__(self, message: str, *, status_code: int | None = None, code: str | None = None,
                 **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code
        if code is not None:
            self.code = code
        self.extra = extra

    def to_body(self) -> dict[str, Any]:
        return {"detail": {"error": {"code": self.code, "message": self.message, **self.extra}}}


class RolloutError(TaskAppError):
    """The rollout could not be carried out (bad request for this task, environment failure)."""

    status_code = 500
    code = "rollout_failed"


class InferenceError(RolloutError):
    """The policy's model endpoint failed, timed out, or answered something that is not a chat completion."""

    status_code = 502
    code = "inference_failed"


class TaskAppNotFoundError(NotFoundError):
    code = "task_app_not_found"
