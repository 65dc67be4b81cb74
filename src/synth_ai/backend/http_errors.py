"""Errors the API answers with, and their one JSON shape.

Every error body is `{"detail": "<message>", "error": {"code", "message", "hint"?, "details"?}}`: `detail` keeps
generic clients (and FastAPI conventions) working, `error` carries what our client maps to a typed exception.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(self, status_code: int, code: str, message: str, *, hint: str | None = None,
                 details: Any = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.message = message
        self.hint = hint
        self.details = details
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return error_body(self.code, self.message, hint=self.hint, details=self.details)


def error_body(code: str, message: str, *, hint: str | None = None, details: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if hint:
        error["hint"] = hint
    if details is not None:
        error["details"] = details
    return {"detail": message, "error": error}


def not_found(kind: str, ident: str, *, hint: str | None = None) -> ApiError:
    return ApiError(404, "not_found", f"{kind} '{ident}' not found.", hint=hint)


def bad_request(message: str, *, code: str = "invalid_request", hint: str | None = None, details: Any = None) -> ApiError:
    return ApiError(400, code, message, hint=hint, details=details)


def conflict(message: str, *, code: str = "conflict", hint: str | None = None, details: Any = None) -> ApiError:
    return ApiError(409, code, message, hint=hint, details=details)
