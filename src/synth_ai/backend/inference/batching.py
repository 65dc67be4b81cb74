"""Continuous batching: concurrent chat completions for one model decode together, joining and leaving between steps.

Callers `submit` a job and block until it is done. One generation thread owns the running batch (a
`decoding.RunningBatch`, driven through the engine's `Runner` methods): between two decoding steps it admits the
jobs waiting at the front of the queue that fit (same loaded model, text only, rows up to `max_batch`), and a job
whose rows have all ended is answered right away, while the others decode on. When the batch is empty, the thread
waits for a job and then up to `window_s` for more, so requests that arrive together prefill together (up to
`GATHER_FACTOR` times longer while fewer wait than the last batch held, that long window counted from the latest
arrival while requests keep coming, at most `GATHER_CAP` long windows in all). A job with
images, and every job on a vision model, runs alone (one `generate`) when it reaches the front of the queue, between
two steps of the running batch; jobs behind it wait their turn (first come, first served, no starvation).

Holding: between `hold()` and `release()` no generation starts (nor joins the running batch); jobs queue, already
tokenised. The RL loop holds its policy while the optimiser rewrites the weights the batch would read, and sends the
next iteration's rollouts meanwhile (`trainers/rl/prefetch.py`); on release they prefill together.

Back-pressure: at most `max_queue` jobs wait (jobs in the running batch are not waiting); one more raises
`RateLimitError` (the HTTP layers answer 429 with `Retry-After`) instead of queueing without bound.

Settings (environment): `SYNTH_INFERENCE_MAX_BATCH` (rows per batch, default 32), `SYNTH_INFERENCE_MAX_QUEUE`
(waiting requests, default 256), `SYNTH_INFERENCE_BATCH_WINDOW_MS` (default 5).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from synth_ai.errors import RateLimitError

RETRY_AFTER_S = 1
GATHER_FACTOR = 10  # an empty batch's window stretches this much while fewer rows wait than the last batch held
GATHER_CAP = 4  # and, while requests keep arriving, restarts from the latest one, up to this many long windows


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
    encoded: Any = None  # set when admitted (generation.Encoded)
    sampled: list[Any] = field(default_factory=list)  # its generation.Row objects, in choice order
    rows_left: int = 0

    @property
    def rows(self) -> int:
        return int(self.params["n"])

    def batchable(self) -> bool:
        return not self.images and not self.loaded.vision


class Runner(Protocol):
    """What the batcher drives (the engine implements it); each returns the jobs it finished (result or error set)."""

    def admit(self, batch: Any, jobs: list[Job]) -> tuple[Any, list[Job]]: ...  # batch may be None: starts one

    def step(self, batch: Any) -> list[Job]: ...

    def run_alone(self, job: Job) -> None: ...

    def abandon(self, batch: Any) -> list[Job]: ...  # after an error: the jobs that were in the batch


def _env_int(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value >= 1 else default


class Batcher:
    def __init__(self, runner: Runner, *, max_batch: int | None = None, max_queue: int | None = None,
                 window_s: float | None = None) -> None:
        self.runner = runner
        self.max_batch = max_batch or _env_int("SYNTH_INFERENCE_MAX_BATCH", 32)
        self.max_queue = max_queue or _env_int("SYNTH_INFERENCE_MAX_QUEUE", 256)
        self.window_s = window_s if window_s is not None else \
            _env_int("SYNTH_INFERENCE_BATCH_WINDOW_MS", 5) / 1000
        self._waiting: deque[Job] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        # for tests and benches: admissions (prefills, or jobs run alone), rows admitted, rows admitted into a
        # batch already decoding, decoding steps
        self.batches = 0
        self.rows = 0
        self.joined = 0
        self.steps = 0
        self._peak = 0  # the most rows the current (or last) batch held
        self._arrived = 0.0  # when the latest job was submitted (monotonic)
        self._held = False

    def hold(self) -> None:
        """Start no generation until `release()` (see the module doc)."""
        with self._cond:
            self._held = True

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def submit(self, job: Job) -> Any:
        with self._cond:
            if len(self._waiting) >= self.max_queue:
                raise RateLimitError(f"The inference queue is full ({self.max_queue} requests waiting).",
                                     hint=f"Retry after {RETRY_AFTER_S} s, or send fewer requests at once "
                                          "(SYNTH_INFERENCE_MAX_QUEUE sets the limit).")
            self._waiting.append(job)
            self._arrived = time.monotonic()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="inference-batcher", daemon=True)
                self._thread.start()
            if not self._held:  # a held batcher has nothing to do before release() (which notifies)
                self._cond.notify_all()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result

    def _loop(self) -> None:
        batch: Any = None
        while True:
            jobs = self._admissions(batch)
            try:
                if jobs and not jobs[0].batchable():
                    self.batches += 1
                    self.rows += jobs[0].rows
                    self.runner.run_alone(jobs[0])
                    _finish(jobs)
                    continue
                if jobs:
                    self.batches += 1
                    self.rows += sum(job.rows for job in jobs)
                    if batch is not None and len(batch):
                        self.joined += sum(job.rows for job in jobs)
                    batch, finished = self.runner.admit(batch, jobs)
                    _finish(finished)
                if batch is not None and len(batch):
                    self._peak = max(self._peak, len(batch))
                    self.steps += 1
                    _finish(self.runner.step(batch))
            except BaseException as exc:  # noqa: BLE001 - every caller in flight hears about it; the thread lives on
                lost = list(jobs) + (self.runner.abandon(batch) if batch is not None else [])
                batch = None
                for job in lost:
                    if not job.done.is_set():
                        if job.result is None and job.error is None:
                            job.error = exc
                        job.done.set()

    def _admissions(self, batch: Any) -> list[Job]:
        """The jobs to admit before the next step: none, one to run alone, or some that join `batch`."""
        running = batch is not None and len(batch) > 0
        with self._cond:
            if not running:
                while not self._waiting or self._held:
                    self._cond.wait()
                first = self._waiting[0]
                if not first.batchable():
                    return [self._waiting.popleft()]
                # a short window, so requests sent together prefill together; longer while fewer wait than the last
                # batch held: its callers (a client's threads, an RL iteration's rollouts) are likely sending their
                # next requests, and one prefill costs less than many steps of a batch that keeps being joined
                # (the long window runs from the latest arrival while requests keep coming, up to GATHER_CAP
                # long windows: on a busy machine a task app hands over an RL batch's calls more slowly, and a
                # batch started on part of them pays another prefill and more steps for the rest)
                start, last = time.monotonic(), self._peak
                while (rows := self._compatible_rows(first)) < self.max_batch:
                    long = self.window_s * GATHER_FACTOR
                    deadline = start + self.window_s if rows >= last else \
                        min(max(start, self._arrived) + long, start + long * GATHER_CAP)
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._held:  # held during the window: wait again (the loop comes back here)
                    return []
                self._peak = 0
                jobs, rows = [self._waiting.popleft()], first.rows
                for job in list(self._waiting):  # compatible jobs anywhere in the queue start with it
                    if self._fits(first, job) and rows + job.rows <= self.max_batch:
                        self._waiting.remove(job)
                        jobs.append(job)
                        rows += job.rows
                return jobs
            if self._held:
                return []  # the running batch (a straggler's calls) decodes on; nothing new starts
            if self._waiting and not self._waiting[0].batchable():
                return [self._waiting.popleft()]  # runs alone between two steps
            jobs, rows = [], len(batch)
            while self._waiting:  # into a running batch: from the front only, so a different job is not starved
                job = self._waiting[0]
                if not job.batchable() or job.loaded is not batch.loaded or rows + job.rows > self.max_batch:
                    break
                jobs.append(self._waiting.popleft())
                rows += job.rows
            return jobs

    def _compatible_rows(self, first: Job) -> int:
        return sum(job.rows for job in self._waiting if job is first or self._fits(first, job))

    @staticmethod
    def _fits(first: Job, job: Job) -> bool:
        return job is not first and job.loaded is first.loaded and job.batchable()


def _finish(jobs: list[Job]) -> None:
    for job in jobs:
        job.done.set()
