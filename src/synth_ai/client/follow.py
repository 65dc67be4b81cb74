"""Following a job to its end: status, events (`since_seq`), metrics (`after_step`) and timeline, one poller for
SFT and RL.

Rules: terminal statuses come from one enum; an unknown status keeps polling until the deadline; the deadline is
read from a monotonic clock (`--poll-timeout`), not summed from sleeps; transient errors are retried and a run of
them ends with the job id and the command to resume; metric step 0 is kept; the end is confirmed over REST and
carries `fine_tuned_model`. Clock and sleep are injectable so tests need no real waiting.

A backend with a live event stream (ours) is followed through it (`synth_ai.client.follow_stream`); polling is the
fallback for one without (the hosted backend). What both share (statuses, updates, the result, the errors that end
a follow) is in `synth_ai.client.follow_common`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from synth_ai.client.follow_common import (
    TRANSIENT_ERRORS,
    Contact,
    FollowResult,
    JobStatus,
    Update,
    confirm_end,
    deadline_error,
    read_end,
    status_text,
)
from synth_ai.client.resources import Jobs, next_after_step

EVENTS_PAGE = 200
METRICS_PAGE = 200


def follow_job(
    jobs: Jobs,
    job_id: str,
    *,
    interval: float,
    timeout: float,
    on_update: Callable[[Update], None] = lambda _u: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    max_consecutive_errors: int = 5,
    terminal_grace: float = 30.0,
    stream: bool = True,
) -> FollowResult:
    if stream:  # the backend's event stream when it has one; else the polling below (0.2.17's way)
        from synth_ai.client.follow_stream import StreamUnavailable, stream_job

        try:
            return stream_job(jobs, job_id, timeout=timeout, on_update=on_update, clock=clock, sleep=sleep,
                              max_consecutive_errors=max_consecutive_errors)
        except StreamUnavailable:
            pass
    deadline = clock() + timeout
    terminal_seen_at: float | None = None
    since_seq, after_step = 0, -1
    seen_metrics: set[tuple[str, int]] = set()
    seen_timeline: set[tuple[str, str]] = set()
    last_status: str | None = None
    terminal: JobStatus | None = None
    contact = Contact(jobs, job_id, max_consecutive_errors, on_update)
    job: dict[str, Any] = {}
    event_model: str | None = None
    while True:
        backlog = False  # a full page came back: more is waiting, read it before stopping or sleeping
        try:
            job = jobs.get(job_id)
            text = status_text(job)
            if text and text != last_status:
                last_status = text
                on_update(Update("status", job))
            seq_before, step_before = since_seq, after_step
            events = jobs.events(job_id, since_seq=since_seq, limit=EVENTS_PAGE)
            for event in events:
                seq = event.get("seq")
                if isinstance(seq, int):
                    since_seq = max(since_seq, seq)
                on_update(Update("event", event))
                terminal, event_model = read_end(event, terminal, event_model)
            page = jobs.metrics(job_id, after_step=after_step, limit=METRICS_PAGE)
            for point in page:
                step = point.get("step")
                step = step if isinstance(step, int) else -1
                key = (str(point.get("name")), step)
                if key in seen_metrics:
                    continue
                seen_metrics.add(key)
                on_update(Update("metric", point))
            after_step = next_after_step(page, after_step, METRICS_PAGE)
            backlog = ((len(events) >= EVENTS_PAGE and since_seq > seq_before)
                       or (len(page) >= METRICS_PAGE and after_step > step_before))
            for entry in jobs.timeline(job_id):
                key = (str(entry.get("phase")), str(entry.get("created_at")))
                if key not in seen_timeline:
                    seen_timeline.add(key)
                    on_update(Update("timeline", entry))
            contact.answered()
        except TRANSIENT_ERRORS as exc:
            contact.failed(exc)
        parsed = JobStatus.parse(last_status)
        if terminal is not None and terminal_seen_at is None:
            terminal_seen_at = clock()
        status_ended = parsed is not None and parsed.terminal
        # A trainer's terminal event (`rl.train.completed`) comes just before the worker records the job's end
        # (model registered, status set): wait a little for that, so the exit code is the job's, not the event's.
        event_ended = terminal_seen_at is not None and clock() - terminal_seen_at >= terminal_grace
        if status_ended or event_ended:
            if backlog:
                continue  # the job has ended; show the rest of what it wrote before the final answer
            break
        if clock() >= deadline:
            raise deadline_error(jobs, job_id, last_status, timeout)
        if not backlog:
            wait = contact.pause(interval if terminal_seen_at is None else min(interval, 0.5))
            sleep(max(0.0, min(wait, deadline - clock())))

    return confirm_end(jobs, job_id, job, terminal, event_model)
