"""Validate several config files and report on each (what `synth-ai config validate` shows)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.config.common import ResolveContext
from synth_ai.config.loader import load_config
from synth_ai.config.toml_source import display_path
from synth_ai.errors import ConfigError, ConfigIssue, ExitCode, SynthError


@dataclass
class FileReport:
    path: str
    kind: str | None
    valid: bool
    issues: list[ConfigIssue] = field(default_factory=list)
    error: str | None = None  # a failure that is not about one key (file missing, unreadable)
    resolved: dict[str, Any] | None = None
    exit_code: ExitCode = ExitCode.OK  # why it failed, as the CLI reports it (a missing file: NOT_FOUND)

    def to_dict(self, *, with_resolved: bool = False) -> dict[str, Any]:
        doc: dict[str, Any] = {"path": self.path, "kind": self.kind, "valid": self.valid,
                               "issues": [i.to_dict() for i in self.issues]}
        if self.error:
            doc["error"] = self.error
        if with_resolved and self.resolved is not None:
            doc["resolved"] = self.resolved
        return doc


def validate_files(files: list[str], kind: str | None, *, task_url: str | None = None,
                   allow_experimental: bool | None = None) -> list[FileReport]:
    reports = []
    for file in files:
        ctx = ResolveContext(environ=dict(os.environ), task_url=task_url, allow_experimental=allow_experimental,
                             require_dataset=False)
        try:
            loaded = load_config(file, kind, ctx)
        except ConfigError as err:
            reports.append(FileReport(display_path(Path(file)), kind, False, issues=err.issues,
                                      exit_code=err.exit_code))
        except SynthError as err:
            reports.append(FileReport(display_path(Path(file)), kind, False, error=err.message,
                                      exit_code=err.exit_code))
        else:
            reports.append(FileReport(display_path(loaded.path), loaded.kind, True, issues=loaded.issues,
                                      resolved=loaded.resolved))
    return reports


def exit_code_of(reports: list[FileReport]) -> ExitCode:
    """The first failing file's exit code (the same as `train` or `filter` gives that file), OK when all pass."""
    return next((r.exit_code for r in reports if not r.valid), ExitCode.OK)
