"""The one exception tree of synth-ai and the exit codes the CLI maps it to.

Every error a user can cause or fix is a `SynthError`: it carries a message (what happened), a hint (the fix or
the next command to run) and an exit code. The CLI's error boundary (`synth_ai.cli.boundary`) renders them; nothing
else prints errors. This module imports only the standard library so any layer may raise these.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """Documented process exit codes (docs/cli.md is generated from this table)."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    INVALID_INPUT = 3
    AUTH = 4
    NETWORK = 5
    JOB_FAILED = 6
    TIMEOUT = 7
    NOT_FOUND = 8
    SERVER = 9
    UNAVAILABLE = 10
    ROLLOUTS_FAILED = 11
    NO_MATCH = 12
    INTERRUPTED = 130


EXIT_CODE_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "Success (for `train`, the job succeeded; with `--no-poll`, the job was created).",
    ExitCode.INTERNAL: "Unexpected internal error (a bug). Re-run with `SYNTH_DEBUG=1` for the traceback.",
    ExitCode.USAGE: "Wrong command-line usage: unknown flag, missing argument, bad flag value.",
    ExitCode.INVALID_INPUT: "Invalid input: a config, dataset, model id or file that fails validation, a "
                            "`--port` that another program holds, or an output folder that cannot be written "
                            "(`models export --out` read-only, under a file, or on a full disk).",
    ExitCode.AUTH: "Authentication or permission failure (missing or wrong API key).",
    ExitCode.NETWORK: "A backend or task app could not be reached, or the backend URL answers with a program that "
                      "is not a Synth backend (the message names its reply, e.g. `text/html 404`).",
    ExitCode.JOB_FAILED: "The job ended `failed` or `cancelled`.",
    ExitCode.TIMEOUT: "A deadline passed before the operation finished: `--poll-timeout` (for `train`, the whole "
                      "command, retries included), `--timeout` (`files`, `jobs`, `models`) or a server that never "
                      "answered; the message names the URL.",
    ExitCode.NOT_FOUND: "A named resource (job, file, model, task app) does not exist, or a path given to the "
                        "command (a config file, a dataset) is not there.",
    ExitCode.SERVER: "The server answered with an error it did not explain as bad input (5xx, malformed reply).",
    ExitCode.UNAVAILABLE: "The operation is not available here (missing optional dependency or capability).",
    ExitCode.ROLLOUTS_FAILED: "`eval`: some or all seeds errored or timed out (the rest were scored and stored).",
    ExitCode.NO_MATCH: "Nothing to write: `filter` found no session matching its rules (no output is written).",
    ExitCode.INTERRUPTED: "Interrupted with Ctrl-C; the message says how to resume (a followed job keeps running).",
}


class SynthError(Exception):
    """Base of every error meant for a user: message + hint + exit code."""

    exit_code: ExitCode = ExitCode.INTERNAL
    code: str = "error"

    def __init__(self, message: str, *, hint: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"code": self.code, "message": self.message, "exit_code": int(self.exit_code)}
        if self.hint:
            doc["hint"] = self.hint
        if self.details is not None:
            doc["details"] = self.details
        return doc


class InvalidInputError(SynthError):
    exit_code = ExitCode.INVALID_INPUT
    code = "invalid_input"


class AuthError(SynthError):
    exit_code = ExitCode.AUTH
    code = "auth"


class NetworkError(SynthError):
    exit_code = ExitCode.NETWORK
    code = "network"


class JobFailedError(SynthError):
    exit_code = ExitCode.JOB_FAILED
    code = "job_failed"


class DeadlineError(SynthError):
    exit_code = ExitCode.TIMEOUT
    code = "timeout"


class NotFoundError(SynthError):
    exit_code = ExitCode.NOT_FOUND
    code = "not_found"


class ServerError(SynthError):
    exit_code = ExitCode.SERVER
    code = "server"


class NoMatchError(SynthError):
    exit_code = ExitCode.NO_MATCH
    code = "no_match"


class RateLimitError(SynthError):
    exit_code = ExitCode.SERVER
    code = "rate_limited"


class UnavailableError(SynthError):
    exit_code = ExitCode.UNAVAILABLE
    code = "unavailable"


@dataclass(frozen=True)
class ConfigIssue:
    """One problem found in a config file, located as precisely as the file allows."""

    message: str
    file: str | None = None
    key: str | None = None  # TOML key path, e.g. "[training].batch_size"
    line: int | None = None
    column: int | None = None
    found: Any = None
    has_found: bool = False
    fix: str | None = None
    severity: str = "error"  # "error" | "warning" | "note"

    def location(self) -> str:
        parts = []
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            parts.append(where)
        if self.key:
            parts.append(self.key)
        return ": ".join(parts)

    def render(self) -> str:
        text = self.message
        if self.has_found:
            text += f" (found {_show(self.found)})"
        where = self.location()
        line = f"{where}: {text}" if where else text
        if self.fix:
            line += f"\n    fix: {self.fix}"
        return line

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"severity": self.severity, "message": self.message}
        for name in ("file", "key", "line", "column", "fix"):
            value = getattr(self, name)
            if value is not None:
                doc[name] = value
        if self.has_found:
            doc["found"] = _jsonable(self.found)
        return doc


class ConfigError(InvalidInputError):
    """A config file failed validation; carries every issue found, not only the first."""

    code = "invalid_config"

    def __init__(self, issues: list[ConfigIssue], *, file: str | None = None, hint: str | None = None) -> None:
        errors = [i for i in issues if i.severity == "error"]
        count = len(errors)
        head = f"{file}: " if file else ""
        noun = "problem" if count == 1 else "problems"
        message = f"{head}{count} {noun} found:\n" + "\n".join(f"  - {i.render()}" for i in errors)
        super().__init__(message, hint=hint, details={"issues": [i.to_dict() for i in issues]})
        self.issues = issues


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value) if len(value) <= 80 else repr(value[:77] + "...")
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


_ERROR_BY_CODE: dict[ExitCode, type[SynthError]] = {
    ExitCode.INVALID_INPUT: InvalidInputError,
    ExitCode.AUTH: AuthError,
    ExitCode.NETWORK: NetworkError,
    ExitCode.JOB_FAILED: JobFailedError,
    ExitCode.TIMEOUT: DeadlineError,
    ExitCode.NOT_FOUND: NotFoundError,
    ExitCode.SERVER: ServerError,
    ExitCode.UNAVAILABLE: UnavailableError,
    ExitCode.NO_MATCH: NoMatchError,
}


def error_for_exit_code(code: ExitCode, message: str, *, hint: str | None = None, details: Any = None) -> SynthError:
    """The error type that exits with `code` (for checks that report an exit code rather than raise)."""
    return _ERROR_BY_CODE.get(code, SynthError)(message, hint=hint, details=details)
