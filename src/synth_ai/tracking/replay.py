"""`synth-ai jobs log JOB --to ...`: a job's metric points, sample tables and outcome, read from any backend that
speaks the learning API (the job, its events and its metrics: nothing else), written to one tracker as a new run.
A new run each time, so a replay never doubles the points of the job's live run or of an earlier replay."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from synth_ai.tracking.public_config import public_config
from synth_ai.tracking.settings import config_of_job, logging_of_job, resolve_tracking
from synth_ai.tracking.tables import table_from_event
from synth_ai.tracking.tracker import Tracker

TERMINAL = ("succeeded", "failed", "cancelled")


@dataclass
class ReplayResult:
    job_id: str
    tracker: str
    run_id: str
    run_name: str
    status: str
    points: int
    tables: int
    where: str
    failed: dict[str, str] = field(default_factory=dict)  # tracker: why


def replay_job(jobs: Any, job_id: str, *, to: str, data_dir: Path, environ: Mapping[str, str],
               project: str | None = None, run_name: str | None = None,
               tensorboard_dir: Path | None = None) -> ReplayResult:
    """`jobs`: the job family that knows the job (`get`, `all_events`, `all_metrics`)."""
    job = jobs.get(job_id)
    table = dict(logging_of_job(job) or {})
    table.update({k: v for k, v in (("project", project), ("run_name", run_name)) if v})
    run_id = f"{job_id}-replay-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}"
    table["tensorboard_dir"] = str(tensorboard_dir) if tensorboard_dir else None
    settings = resolve_tracking(table, run_id=run_id, data_dir=data_dir, environ=environ, run_name=job_id,
                                report_to=(to,))
    assert settings is not None
    if not table.get("run_name") and not run_name:
        settings = replace(settings, run_name=job_id)
    failures: dict[str, str] = {}
    tracker = Tracker(settings, config=public_config(config_of_job(job)),
                      warn=lambda name, reason, fix: failures.setdefault(name, f"{reason}. To fix: {fix}"))
    status = str(job.get("status") or "unknown")
    try:
        points = jobs.all_metrics(job_id)
        tracker.points((p["name"], p["step"], p.get("value"), p.get("phase") or "train") for p in points
                       if isinstance(p.get("name"), str) and isinstance(p.get("step"), int))
        tables = 0
        for event in jobs.all_events(job_id):
            if table_from_event(event.get("data")) is not None:
                tables += 1
                tracker.event(event["data"])
    finally:
        fine_tuned = job.get("fine_tuned_model")
        tracker.close(status=status if status in TERMINAL else "interrupted",
                      summary={"job_id": job_id, "status": status, "fine_tuned_model": fine_tuned},
                      tags=[str(fine_tuned)[:64]] if fine_tuned else [])
    return ReplayResult(job_id, to, run_id, settings.run_name, status, len(points), tables, _where(settings, to,
                        environ), failures)


def _where(settings: Any, to: str, environ: Mapping[str, str]) -> str:
    if to == "tensorboard":
        return str(settings.tensorboard_dir)
    if to == "wandb":
        mode = environ.get("WANDB_MODE", "online")
        return f"W&B project {settings.wandb_project} ({mode})"
    return f"MLflow experiment {settings.mlflow_experiment} at {environ.get('MLFLOW_TRACKING_URI') or './mlruns'}"
