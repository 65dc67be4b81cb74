"""Run one `synth-ai …` command the way a user would, and read its `--json` document.

The demo drives the real CLI in child processes (the same code paths a user runs by hand) and prints each
command line first, so any step can be repeated. A child's JSON document is its result; a non-zero exit becomes
a `StepFailed` carrying the child's own error message and exit code.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from synth_ai.errors import ExitCode, SynthError


class StepFailed(SynthError):
    """A demo step's command exited non-zero; its exit code becomes the demo's."""

    code = "demo_step_failed"

    def __init__(self, message: str, *, exit_code: int, hint: str | None = None, details: Any = None) -> None:
        super().__init__(message, hint=hint, details=details)
        try:
            self.exit_code = ExitCode(exit_code)
        except ValueError:
            self.exit_code = ExitCode.INTERNAL


@dataclass
class CommandRecord:
    """What one step ran and what came back (kept for the report and `--json`)."""

    step: str
    argv: list[str]
    exit_code: int
    seconds: float
    result: Any = None

    @property
    def command(self) -> str:
        return shlex.join(["synth-ai", *self.argv])

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "command": self.command, "exit_code": self.exit_code,
                "seconds": round(self.seconds, 2)}


@dataclass
class CommandRunner:
    """Runs `python -m synth_ai <argv> --json` in the run folder with the demo's environment."""

    cwd: Path
    env: dict[str, str]
    say: Callable[[str], None]
    records: list[CommandRecord] = field(default_factory=list)

    def run(self, step: str, argv: list[str], *, allow: tuple[int, ...] = (0,)) -> Any:
        import time

        self.say(f"$ {shlex.join(['synth-ai', *argv])}")
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "synth_ai", "--json", *argv], cwd=self.cwd, env=self.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)  # our Ctrl-C handler decides what the child must do
        try:
            stdout, stderr = proc.communicate()
        except KeyboardInterrupt:
            _interrupt(proc)
            raise
        record = CommandRecord(step, argv, proc.returncode, time.monotonic() - started, _json_of(stdout))
        self.records.append(record)
        if proc.returncode not in allow:
            raise _failure(record, stderr)
        return record.result


def _interrupt(proc: subprocess.Popen) -> None:
    """Pass Ctrl-C on to the child (a follow detaches cleanly on SIGINT), then make sure it is gone."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=10)
    except (ProcessLookupError, PermissionError):
        pass
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _json_of(stdout: str) -> Any:
    text = stdout.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        last = text.splitlines()[-1]  # NDJSON streams (a follow): the last line is the final document
        try:
            return json.loads(last)
        except json.JSONDecodeError:
            return {"raw": text[-2000:]}


def _failure(record: CommandRecord, stderr: str) -> StepFailed:
    doc = record.result if isinstance(record.result, dict) else {}
    error = doc.get("error") if isinstance(doc.get("error"), dict) else {}
    message = error.get("message") or (stderr.strip().splitlines() or [f"exit code {record.exit_code}"])[-1]
    return StepFailed(f"Step '{record.step}' failed (exit {record.exit_code}): {message}",
                      exit_code=record.exit_code,
                      hint=f"Re-run it by hand to see everything it printed:\n  {record.command}",
                      details={"command": record.command, "exit_code": record.exit_code, "error": error or None})
