"""Following a job through the backend's server-sent-events stream (`GET {prefix}/{id}/events/stream`).

The same contract as the poller in `synth_ai.client.follow`, built from the same parts (`follow_common`): the same
updates, a deadline read from a monotonic clock, a run of transient errors ends with the resume command, the end
confirmed over REST; but each event arrives as it is written instead of at the next poll. A dropped connection
reconnects with `Last-Event-ID`, so nothing is lost or shown twice. A backend without the route (404, 405, or a
reply that is not an event stream: the hosted one) raises `StreamUnavailable` before anything was shown, and the
caller polls instead.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from synth_ai.client.follow_common import (
    TRANSIENT_ERRORS,
    Contact,
    FollowResult,
    JobStatus,
    Update,
    command_deadline_passed,
    confirm_end,
    deadline_error,
    read_end,
    status_text,
)
from synth_ai.client.resources import Jobs
from synth_ai.errors import NetworkError, SynthError

# The server sends a keep-alive after 10 s without news; this long without a byte means the connection is dead.
SILENCE_LIMIT_S = 35.0
RECONNECT_DELAY_S = 0.5
# Answers that mean "this backend has no stream": no route, wrong method, not an event stream, not implemented.
NO_STREAM_STATUSES = {404, 405, 415, 501}


class StreamUnavailable(Exception):
    """The backend offers no event stream for this job family; poll instead."""


@dataclass
class Frame:
    kind: str  # status | event | metric | timeline | end, or "keep-alive" for a comment line
    data: Any
    id: str | None


def parse_frames(lines: Iterable[str]) -> Iterator[Frame]:
    """Server-sent events from text lines: `event:`/`data:`/`id:` fields, a blank line ends a frame, `:` comments
    are keep-alives."""
    kind, data, frame_id = "message", [], None
    for line in lines:
        if not line:
            if data:
                yield Frame(kind, json.loads("\n".join(data)), frame_id)
            kind, data, frame_id = "message", [], None
        elif line.startswith(":"):
            yield Frame("keep-alive", None, None)
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                kind = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                frame_id = value


def stream_job(
    jobs: Jobs,
    job_id: str,
    *,
    timeout: float,
    on_update: Callable[[Update], None],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    max_consecutive_errors: int = 5,
) -> FollowResult:
    deadline = clock() + timeout
    cursor: str | None = None
    opened = False
    contact = Contact(jobs, job_id, max_consecutive_errors, on_update)
    last_status: str | None = None
    terminal: JobStatus | None = None
    event_model: str | None = None
    job: dict[str, Any] = {}
    while True:
        remaining = deadline - clock()
        if remaining <= 0:
            raise deadline_error(jobs, job_id, last_status, timeout)
        lines = jobs.stream(job_id, last_event_id=cursor, read_timeout=min(SILENCE_LIMIT_S, remaining))
        try:
            with contextlib.closing(lines):
                for frame in parse_frames(lines):
                    if not opened or contact.failures:
                        contact.answered()
                    opened = True
                    cursor = frame.id or cursor
                    if frame.kind == "end":
                        return confirm_end(jobs, job_id, job, terminal, event_model)
                    if frame.kind == "status":
                        job = frame.data
                        text = status_text(job)
                        if text and text != last_status:
                            last_status = text
                            on_update(Update("status", job))
                    elif frame.kind in ("event", "metric", "timeline"):
                        on_update(Update(frame.kind, frame.data))
                        if frame.kind == "event":
                            terminal, event_model = read_end(frame.data, terminal, event_model)
                    if clock() >= deadline:
                        raise deadline_error(jobs, job_id, last_status, timeout)
            raise NetworkError(f"The event stream of job {job_id} closed before the job ended.")
        except TRANSIENT_ERRORS as exc:  # the poller's rule: reconnect, and a run of them ends the follow
            if clock() >= deadline and not command_deadline_passed(exc):
                raise deadline_error(jobs, job_id, last_status, timeout) from None
            contact.failed(exc)
            sleep(min(contact.pause(RECONNECT_DELAY_S), max(0.0, deadline - clock())))
        except SynthError as exc:
            if not opened and (exc.details or {}).get("status") in NO_STREAM_STATUSES:
                raise StreamUnavailable(exc.message) from None
            raise
