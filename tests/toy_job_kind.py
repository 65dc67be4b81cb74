"""A third job kind, registered from outside the backend (tests/test_job_kind_extension.py): it counts to
`steps`, reporting one event and one metric point per step. This is all a kind needs: its body check, its
settings reader and its run, plus one `register_kind` call. The backend learns of it through SYNTH_AI_JOB_KINDS
(this module's name), in its own process and in every worker process it starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.backend.http_errors import ApiError
from synth_ai.backend.jobs.kinds import JobKind, register_kind
from synth_ai.backend.trainers.job_context import JobReporter, ModelLocator, StopCheck
from synth_ai.config.job_specs import JobSpec


@dataclass(frozen=True)
class CountingSettings:
    steps: int


def check_body(body: Any, **_context: Any) -> dict[str, Any]:
    steps = body.get("steps") if isinstance(body, dict) else None
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ApiError(400, "invalid_job", f"steps must be a whole number >= 1 (found {steps!r})",
                       details={"field": "steps"})
    return dict(body)


def read_settings(spec: JobSpec) -> CountingSettings:
    return CountingSettings(steps=int(spec.get("steps")))


def run(spec: JobSpec, *, workdir: Path, model_store: ModelLocator, reporter: JobReporter,
        should_stop: StopCheck) -> dict[str, Any]:
    settings = read_settings(spec)
    for step in range(settings.steps):
        if should_stop():
            return {"stopped": True}
        reporter.metric("count.value", step, float(step + 1))
        reporter.event("count.step", f"Counted {step + 1} of {settings.steps}.", {"step": step})
    (Path(workdir) / "count.txt").write_text(str(settings.steps))
    return {"fine_tuned_model": f"counted:{spec.model}:{spec.job_id}", "steps": settings.steps}


COUNTING = register_kind(JobKind(
    name="counting", training_type="counting", id_prefix="countjob", body_check=f"{__name__}:check_body",
    settings=f"{__name__}:read_settings", runner=f"{__name__}:run", package=__name__, resumable=False))
