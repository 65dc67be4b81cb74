"""The registry of job kinds: what the create routes, the body checks and the worker need to know about SFT and
RL, in one place. Adding an algorithm is one package under `backend/trainers/` plus one entry here.

Each part of a kind is named by `module:attribute` and imported only when used: the API process reads settings
(pure Python) but never imports the training stack (torch), which only the worker loads, and the worker, which
only runs jobs, never loads the config models (pydantic) the create-time checks are built from.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from synth_ai.backend.http_errors import ApiError
from synth_ai.errors import SynthError


@dataclass(frozen=True)
class JobKind:
    name: str  # the jobs table's `kind`, and the prefix of the job's events ("sft.job.created")
    training_type: str  # stored when the body names none
    id_prefix: str  # job ids look like "<id_prefix>_<hex>"
    body_check: str  # "module:function": the create body checked and normalised, or an ApiError(400)
    settings: str  # "module:function": the stored payload read into the trainer's settings (no torch)
    runner: str  # "module:function": the training run, imported only by the worker
    package: str  # the trainer package; without it the kind is not available here

    @property
    def event_prefix(self) -> str:
        return self.name

    def available(self) -> bool:
        try:
            return importlib.util.find_spec(self.package) is not None
        except (ImportError, ValueError):
            return False

    def check_body(self, body: Any, **context: Any) -> dict[str, Any]:
        return _load(self.body_check)(body, **context)

    def resolve_settings(self, spec: dict[str, Any]) -> Any:
        return _load(self.settings)(spec)

    def check_settings(self, spec: dict[str, Any]) -> None:
        """Let the trainer read the settings now, so that a value only it refuses is a 400, not a failed job."""
        try:
            self.resolve_settings(spec)
        except SynthError as exc:
            details = exc.details if isinstance(exc.details, dict) else {}
            raise ApiError(400, details.get("code", "invalid_job"), exc.message, hint=exc.hint,
                           details={"field": details["field"]} if "field" in details else None) from None

    def run(self, spec: dict[str, Any], **context: Any) -> dict[str, Any]:
        return _load(self.runner)(spec, **context) or {}


def _load(reference: str) -> Callable[..., Any]:
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


KINDS: dict[str, JobKind] = {kind.name: kind for kind in (
    JobKind(name="sft", training_type="sft_offline", id_prefix="job",
            body_check="synth_ai.backend.jobs.job_bodies:check_sft_body",
            settings="synth_ai.backend.trainers.sft.sft_settings:resolve_settings",
            runner="synth_ai.backend.trainers.sft.trainer:run_sft", package="synth_ai.backend.trainers.sft"),
    JobKind(name="rl", training_type="rl_online", id_prefix="rljob",
            body_check="synth_ai.backend.jobs.job_bodies:check_rl_body",
            settings="synth_ai.backend.trainers.rl.rl_settings:check_rl_job",
            runner="synth_ai.backend.trainers.rl.loop:run_rl", package="synth_ai.backend.trainers.rl"),
)}


def job_kind(name: str) -> JobKind:
    kind = KINDS.get(name)
    if kind is None:
        raise ValueError(f"unknown job kind {name!r}; known: {', '.join(KINDS)}")
    return kind
