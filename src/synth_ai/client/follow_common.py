"""What both ways of following a job share: its statuses, the updates shown, the result, and the errors that end a
follow with the command to resume.

The poller (`synth_ai.client.follow`) and the event-stream follower (`synth_ai.client.follow_stream`) both build on
this module, so neither imports the other's internals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import urlsplit

from synth_ai.client.resources import Jobs
from synth_ai.env.exposure import is_loopback
from synth_ai.errors import DeadlineError, NetworkError, RateLimitError, ServerError, SynthError
from synth_ai.models.job_ids import kind_of_job_id

# What a poll may fail with and still be tried again at the next interval (a run of them ends the follow).
TRANSIENT_ERRORS = (NetworkError, ServerError, DeadlineError, RateLimitError)


class JobStatus(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @classmethod
    def parse(cls, raw: Any) -> JobStatus | None:
        """Known statuses and their synonyms; None for anything else (which is not terminal)."""
        text = str(raw or "").strip().lower()
        return _SYNONYMS.get(text)

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


_SYNONYMS = {
    "queued": JobStatus.QUEUED, "pending": JobStatus.QUEUED, "created": JobStatus.QUEUED,
    "running": JobStatus.RUNNING, "in_progress": JobStatus.RUNNING, "training": JobStatus.RUNNING,
    "succeeded": JobStatus.SUCCEEDED, "completed": JobStatus.SUCCEEDED, "success": JobStatus.SUCCEEDED,
    "failed": JobStatus.FAILED, "error": JobStatus.FAILED, "errored": JobStatus.FAILED,
    "cancelled": JobStatus.CANCELLED, "canceled": JobStatus.CANCELLED,
}

TERMINAL_EVENTS = {
    "sft.job.completed": JobStatus.SUCCEEDED, "rl.train.completed": JobStatus.SUCCEEDED,
    "rl.job.completed": JobStatus.SUCCEEDED, "workflow.completed": JobStatus.SUCCEEDED,
    "training.completed": JobStatus.SUCCEEDED,
    "sft.job.failed": JobStatus.FAILED, "rl.train.failed": JobStatus.FAILED, "rl.job.failed": JobStatus.FAILED,
    "workflow.failed": JobStatus.FAILED, "training.failed": JobStatus.FAILED,
    "sft.job.cancelled": JobStatus.CANCELLED, "rl.job.cancelled": JobStatus.CANCELLED,
}


@dataclass
class Update:
    kind: str  # "status" | "event" | "metric" | "timeline" | "notice" (the follower's own, e.g. waiting for a backend)
    data: dict[str, Any]


@dataclass
class FollowResult:
    job_id: str
    status: str
    job: dict[str, Any] = field(default_factory=dict)
    fine_tuned_model: str | None = None

    @property
    def succeeded(self) -> bool:
        return JobStatus.parse(self.status) == JobStatus.SUCCEEDED


def job_flags(jobs: Jobs | None, job_id: str) -> str:
    """The `jobs` command flags that reach the same job again: its backend, and its family where the id does not
    say it (`--kind` is inferred from `job_…`/`rljob_…`; an id of another shape is looked up as SFT first)."""
    if jobs is None:
        return ""
    family = "rl" if jobs.prefix == "/rl/jobs" else "sft"
    kind = f" --kind {family}" if family != (kind_of_job_id(job_id) or "sft") else ""
    return f"{kind} --backend {jobs.t.api_base}"


def resume_command(job_id: str, jobs: Jobs | None = None) -> str:
    """The command that picks the job up again (`jobs events ID --follow` does the same under its old name)."""
    return f"synth-ai jobs follow {job_id}{job_flags(jobs, job_id)}"


def deadline_error(jobs: Jobs, job_id: str, status: str | None, timeout: float) -> DeadlineError:
    return DeadlineError(f"Job {job_id} is still {status or 'pending'} after {timeout:g} s (--poll-timeout).",
                         hint=f"The job keeps running. Resume with: {resume_command(job_id, jobs)}",
                         details={"job_id": job_id, "status": status})


def status_text(job: dict[str, Any]) -> str:
    return str(job.get("status") or job.get("state") or "").lower()


def read_end(event: dict[str, Any], terminal: JobStatus | None, model: str | None
             ) -> tuple[JobStatus | None, str | None]:
    """What an event says about the job's end: a terminal status (the first one seen wins) and the
    `fine_tuned_model` it names, if any."""
    terminal = terminal or TERMINAL_EVENTS.get(str(event.get("type", "")))
    data = event.get("data")
    if isinstance(data, dict) and isinstance(data.get("fine_tuned_model"), str):
        model = data["fine_tuned_model"]
    return terminal, model


def command_deadline_passed(exc: SynthError) -> bool:
    """The command's own deadline passed inside a call (a backend that stopped answering): stop, don't retry."""
    return isinstance(exc, DeadlineError) and isinstance(exc.details, dict) and bool(exc.details.get("deadline"))


def hung_call_error(jobs: Jobs, job_id: str, exc: SynthError) -> DeadlineError:
    return DeadlineError(f"{exc.message} (while following job {job_id})",
                         hint=f"The job keeps running. Resume with: {resume_command(job_id, jobs)}",
                         details={**exc.details, "job_id": job_id})


def lost_contact_error(jobs: Jobs, job_id: str, failures: int, last: SynthError) -> NetworkError:
    return NetworkError(f"Lost contact with the backend while following job {job_id} ({failures} failures in a row; "
                        f"last: {last.message})", hint=f"The job keeps running. Resume with: "
                        f"{resume_command(job_id, jobs)}", details={"job_id": job_id})


LOCAL_RETRY_S = 1.0  # between tries while a backend on this machine is down (restarting: seconds to a minute)
EV_WAITING = "client.backend.waiting"
EV_BACK = "client.backend.back"


class Contact:
    """The rule for a run of failed calls. Against a remote backend, `max_errors` in a row end the follow. A
    backend on this machine (a loopback address) that stops answering is usually restarting (killed, crashed,
    `backend restart`) and resumes its jobs when it is back: the follower says once that it waits, keeps trying
    until the command's deadline (`--poll-timeout`, checked by the caller), and says when it is back."""

    def __init__(self, jobs: Jobs, job_id: str, max_errors: int, on_update: Callable[[Update], None]) -> None:
        self.jobs, self.job_id, self.max_errors, self.on_update = jobs, job_id, max_errors, on_update
        self.local = is_loopback(urlsplit(jobs.t.api_base).hostname or "")
        self.failures = 0
        self.waiting = False

    def failed(self, exc: SynthError) -> None:
        """Count a transient failure; raise when it ends the follow."""
        if command_deadline_passed(exc):
            raise hung_call_error(self.jobs, self.job_id, exc) from None
        self.failures += 1
        if self.failures < self.max_errors:
            return  # a dropped connection or a short hiccup: try again quietly
        if not (self.local and isinstance(exc, NetworkError)):
            raise lost_contact_error(self.jobs, self.job_id, self.failures, exc) from None
        if not self.waiting:
            self.waiting = True
            self.on_update(Update("notice", {
                "type": EV_WAITING, "level": "warning", "error": exc.message,
                "message": f"The backend at {self.jobs.t.api_base} stopped answering ({exc.message}); waiting for "
                           "it to come back (a restarted backend resumes the job) until the poll timeout"}))

    def answered(self) -> None:
        if self.waiting:
            self.on_update(Update("notice", {"type": EV_BACK, "level": "info",
                                             "message": f"The backend answers again; following job {self.job_id}"}))
        self.failures, self.waiting = 0, False

    def pause(self, usual: float) -> float:
        """How long to wait before the next try."""
        return max(usual, LOCAL_RETRY_S) if self.waiting else usual


def confirm_end(jobs: Jobs, job_id: str, job: dict[str, Any], terminal: JobStatus | None,
                event_model: str | None) -> FollowResult:
    """Confirm the end over REST: the status payload is the source of truth for fine_tuned_model."""
    try:
        job = jobs.get(job_id)
    except TRANSIENT_ERRORS:
        pass
    final = JobStatus.parse(job.get("status") or job.get("state"))
    status = (final if final is not None and final.terminal else terminal or JobStatus.FAILED).value
    model = job.get("fine_tuned_model") or event_model
    return FollowResult(job_id=job_id, status=status, job=job, fine_tuned_model=model)
