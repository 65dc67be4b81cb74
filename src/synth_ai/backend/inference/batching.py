"""Dynamic batching: concurrent chat completions for one model share one `generate` call.

Callers `submit` a job and block until it is done. One generation thread takes the oldest waiting job, waits up to
`window_s` for more (so requests that arrive together batch together; up to `GATHER_FACTOR` times longer while
fewer wait than the previous batch held, the steady state of a fixed number of busy callers), then runs every waiting job compatible
with it (same loaded model, text only, rows up to `max_batch`) as one batch. Requests that arrive while a batch
generates wait for the next one. Jobs with images, and every job on a vision model, run alone.

Back-pressure: at most `max_queue` jobs wait; one more raises `RateLimitError` (the HTTP layers answer 429 with
`Retry-After`) instead of queueing without bound.

Settings (environment): `SYNTH_INFERENCE_MAX_BATCH` (rows per batch, default 32), `SYNTH_INFERENCE_MAX_QUEUE`
(waiting requests, default 256), `SYNTH_INFERENCE_BATCH_WINDOW_MS` (default 5).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from synth_ai.errors import RateLimitError

RETRY_AFTER_S = 1
GATHER_FACTOR = 10  # the window stretches this much while fewer requests wait than the last batch held


@dataclass(eq=False)  # jobs are compared by identity: two identical requests are two jobs
class Job:
    loaded: Any
    params: dict[str, Any]
    messages: list[dict[str, Any]]
    images: list[Any]
    record: bool
    result: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def rows(self) -> int:
        return int(self.params["n"])

    def batchable(self) -> bool:
        return not self.images and not self.loaded.vision


def _env_int(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value >= 1 else default


class Batcher:
    def __init__(self, run_batch: Callable[[list[Job]], None], *, max_batch: int | None = None,
                 max_queue: int | None = None, window_s: float | None = None) -> None:
        self.run_batch = run_batch  # sets each job's result or error
        self.max_batch = max_batch or _env_int("SYNTH_INFERENCE_MAX_BATCH", 32)
        self.max_queue = max_queue or _env_int("SYNTH_INFERENCE_MAX_QUEUE", 256)
        self.window_s = window_s if window_s is not None else \
            _env_int("SYNTH_INFERENCE_BATCH_WINDOW_MS", 5) / 1000
        self._waiting: deque[Job] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._last_rows = 0
        self.batches = 0  # how many generate calls ran, and how many rows they held (for tests and benches)
        self.rows = 0

    def submit(self, job: Job) -> Any:
        with self._cond:
            if len(self._waiting) >= self.max_queue:
                raise RateLimitError(f"The inference queue is full ({self.max_queue} requests waiting).",
                                     hint=f"Retry after {RETRY_AFTER_S} s, or send fewer requests at once "
                                          "(SYNTH_INFERENCE_MAX_QUEUE sets the limit).")
            self._waiting.append(job)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="inference-batcher", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result

    def _loop(self) -> None:
        while True:
            batch = self._next_batch()
            try:
                self.run_batch(batch)
            except BaseException as exc:  # noqa: BLE001 - every caller hears about it; the thread lives on
                for job in batch:
                    if job.result is None and job.error is None:
                        job.error = exc
            finally:
                self.batches += 1
                self.rows += sum(job.rows for job in batch)
                for job in batch:
                    job.done.set()

    def _next_batch(self) -> list[Job]:
        with self._cond:
            while not self._waiting:
                self._cond.wait()
            first = self._waiting[0]
            if first.batchable():
                start = time.monotonic()
                while (rows := self._compatible_rows(first)) < self.max_batch:
                    # fewer waiting than the last batch held: its callers are likely sending their next requests
                    # (as a client's threads, or an RL loop's rollouts, do once answered), so wait a little longer
                    window = self.window_s if rows >= self._last_rows else self.window_s * GATHER_FACTOR
                    left = start + window - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            batch, rows = [self._waiting.popleft()], first.rows
            if first.batchable():
                for job in list(self._waiting):
                    if self._fits(first, job) and rows + job.rows <= self.max_batch:
                        self._waiting.remove(job)
                        batch.append(job)
                        rows += job.rows
            self._last_rows = rows
            return batch

    def _compatible_rows(self, first: Job) -> int:
        return sum(job.rows for job in self._waiting if job is first or self._fits(first, job))

    @staticmethod
    def _fits(first: Job, job: Job) -> bool:
        return job is not first and job.loaded is first.loaded and job.batchable()
