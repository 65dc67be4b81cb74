"""The result of loading a config: its kind, the resolved settings and what was noticed on the way."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.config.toml_source import TomlSource
from synth_ai.errors import ConfigIssue
from synth_ai.models.registry import ResolvedModel


@dataclass
class LoadedConfig:
    kind: str  # "rl" | "sft" | "eval" | "filter"
    source: TomlSource
    resolved: dict[str, Any]  # validated, normalised, with defaults injected: what gets sent or run
    issues: list[ConfigIssue] = field(default_factory=list)  # warnings and notes (errors raise instead)
    model: ResolvedModel | None = None
    task_url: str | None = None  # RL: the effective task app URL
    dataset: Path | None = None  # SFT: the training JSONL
    validation_dataset: Path | None = None  # SFT: the validation JSONL, when configured and present

    @property
    def path(self) -> Path:
        return self.source.path

    @property
    def warnings(self) -> list[ConfigIssue]:
        return [i for i in self.issues if i.severity == "warning"]

    @property
    def notes(self) -> list[ConfigIssue]:
        return [i for i in self.issues if i.severity == "note"]
