"""A job's experiment trackers, run inside its worker process and fed by the worker's Reporter: every metric
point and sample-table event the trainer reports reaches W&B, TensorBoard and MLflow as it is written to SQLite
(decision in docs/decisions.md: the worker, not the API process, so no points are polled twice and a backend
restart loses nothing that the job's own restart does not resume). A tracker that fails adds one warning event
`<kind>.tracking.warning`; the job goes on."""

from __future__ import annotations

import logging
import os
from typing import Any

from synth_ai.backend.jobs.kinds import job_kind
from synth_ai.backend.server_settings import BackendSettings
from synth_ai.backend.store import job_records as J
from synth_ai.backend.store.db import loads
from synth_ai.tracking.public_config import public_config
from synth_ai.tracking.settings import config_of_job, logging_of_job, resolve_tracking
from synth_ai.tracking.tracker import Tracker, warning_message

log = logging.getLogger("synth_ai.backend.jobs.tracking")
EV_TRACKING_WARNING = "tracking.warning"
EV_TRACKING_STARTED = "tracking.started"


def start_tracking(settings: BackendSettings, store: J.JobStore, job: Any) -> Tracker | None:
    """The job's tracker when its config has a `[logging]` table that reports somewhere; None otherwise. Never
    raises: a table it cannot use is a warning event."""
    job_id = job["id"]
    prefix = job_kind(job["kind"]).event_prefix
    try:
        doc = {**(loads(job["payload"]) or {}), "model": job["model"]}
        tracking = resolve_tracking(logging_of_job(doc), run_id=job_id, data_dir=settings.data_dir,
                                    environ=os.environ)
        if tracking is None:
            return None

        def warn(name: str, reason: str, fix: str) -> None:
            store.add_event(job_id, f"{prefix}.{EV_TRACKING_WARNING}", warning_message(name, reason, fix),
                            {"tracker": name, "reason": reason, "fix": fix}, "warning")

        tracker = Tracker(tracking, config=public_config(config_of_job(doc)), warn=warn)
    except Exception as exc:  # noqa: BLE001 - tracking never fails a job
        log.exception("tracking: could not start for job %s", job_id)
        store.add_event(job_id, f"{prefix}.{EV_TRACKING_WARNING}",
                        f"Tracking is off for this run: it could not start ({type(exc).__name__}: {exc}).",
                        {"tracker": None, "reason": str(exc)[:500]}, "warning")
        return None
    where = {"tensorboard_dir": str(tracking.tensorboard_dir)} if "tensorboard" in tracking.report_to else {}
    store.add_event(job_id, f"{prefix}.{EV_TRACKING_STARTED}",
                    f"Reporting to {', '.join(tracking.report_to)} as run {tracking.run_name!r}.",
                    {"report_to": list(tracking.report_to), "run_name": tracking.run_name, **where}, "info")
    return tracker


def close_tracking(tracker: Tracker | None, store: J.JobStore, job_id: str) -> None:
    """At the worker's end: the job's outcome (its status, the fine-tuned model) as the runs' summary and tags."""
    if tracker is None:
        return
    try:
        row = store.get(job_id)
        status = row["status"] if row is not None and row["status"] in J.TERMINAL else "interrupted"
        fine_tuned = row["fine_tuned_model"] if row is not None else None
        tags = [fine_tuned[:64]] if fine_tuned else []  # W&B tags are at most 64 characters
        tracker.close(status=status, summary={"job_id": job_id, "status": status, "fine_tuned_model": fine_tuned},
                      tags=tags)
    except Exception:  # noqa: BLE001 - tracking never fails a job
        log.exception("tracking: could not close for job %s", job_id)
