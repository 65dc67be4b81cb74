"""The continuous rollout pool of asynchronous GSPO (`[training].max_staleness` > 0).

A thread of its own sends the job's rollouts to the task app one batch after another (iteration k's groups are
`loop.iteration_jobs(k)`, the same seeds as the synchronous loop), at most `settings.concurrency` =
min(async_semaphore_max, max_concurrent_rollouts) in flight, without waiting for the trainer: each finished batch
of groups goes into the backlog, and the loop takes iteration k's batch as soon as it is there (`take`), trains
it, publishes the new weights to the engine and says so (`done`). The pool starts batch k only while
k <= (iterations done) + max_staleness: a batch is never started that could only be trained more than
`max_staleness` updates after the weights it samples from (the bound's "not started" half; `staleness` drops what
still falls behind). With `max_staleness = 0` this would be the synchronous loop; the loop keeps its own path then.

Under torchrun each rank's pool runs that rank's share of every batch (`data_parallel.run_local_share`, no
collective call off the loop's thread); `take` combines the ranks' shares in the loop's thread. A stop (cancel,
shutdown) cancels the batch in flight and `take` raises `RolloutsStopped`. The backlog lives in memory only: a
resumed job rebuilds it from the checkpoint's iteration (the same seeds, sampled from the restored weights).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from synth_ai.backend.trainers.rl.data_parallel import combine_rollouts, run_local_share
from synth_ai.backend.trainers.rl.types import Rollout

JOIN_TIMEOUT_S = 30.0  # a closed pool's batch ends at the runner's next stop poll; this only bounds a stuck one
# While the pool runs, the decoding thread and the update share the GIL. Each torch op lets it go, but a thread
# that wants it back waits for the holder's switch interval (5 ms by default): every short decoding op then waits
# on the update's Python, and the two ran slower together than one after the other (bench/README.md). A short
# interval lets them take turns at op granularity.
SWITCH_INTERVAL_S = 1e-4


class SerialRunner:
    """A runner that one thread at a time may use: the pool's thread and the loop's (evaluations, the task-app
    wait's re-sends) share it. `RolloutProcess` already serialises its runs; the in-process runner needs this."""

    def __init__(self, runner: Any) -> None:
        self.inner = runner
        self.policy_url = runner.policy_url
        self._lock = threading.Lock()

    def run(self, jobs: list[tuple[int, int, str]], *, mode: str, extra_policy: dict[str, Any] | None = None
            ) -> list[Rollout]:
        with self._lock:
            return self.inner.run(jobs, mode=mode, extra_policy=extra_policy)

    def abandon(self) -> None:
        self.inner.abandon()

    def close(self) -> None:
        if callable(getattr(self.inner, "close", None)):
            self.inner.close()


class RolloutPool:
    def __init__(self, runner: Any, dp: Any, jobs_of: Callable[[int], list[tuple[int, int, str]]], *, first: int,
                 end: int, max_ahead: int) -> None:
        self.runner, self.dp, self.jobs_of = runner, dp, jobs_of
        self.end, self.max_ahead = end, max_ahead
        self._done = first  # iterations whose update is finished and published
        self._backlog: dict[int, tuple[list[Rollout], bool]] = {}
        self._error: BaseException | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._thread = threading.Thread(target=self._run, args=(first,), name="rl-rollout-pool", daemon=True)
        self._thread.start()

    def _run(self, first: int) -> None:
        for k in range(first, self.end):
            with self._cond:
                while not self._closed and k > self._done + self.max_ahead:
                    self._cond.wait()
                if self._closed:
                    return
            try:
                outcome = run_local_share(self.runner, self.jobs_of(k), self.dp, mode="rl")
            except BaseException as exc:  # noqa: BLE001 - handed to the loop's thread by take()
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                return
            with self._cond:
                self._backlog[k] = outcome
                self._cond.notify_all()

    def take(self, k: int) -> list[Rollout]:
        """Iteration k's rollouts (every rank's share), once they are all in."""
        with self._cond:
            while k not in self._backlog and self._error is None:
                self._cond.wait()
            if k not in self._backlog:
                raise self._error  # type: ignore[misc]
            results, stopped = self._backlog.pop(k)
        return combine_rollouts(self.jobs_of(k), self.dp, results, stopped)

    def done(self, k: int) -> None:
        """Iteration k's update is finished and its weights published: later batches may start."""
        with self._cond:
            self._done = max(self._done, k + 1)
            self._cond.notify_all()

    def backlog_batches(self) -> int:
        """Finished batches waiting for the trainer."""
        with self._cond:
            return len(self._backlog)

    def close(self) -> None:
        """Cancel the batch in flight and start no other (the loop is leaving)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive():  # a finished pool leaves the runner to the final evaluation
            self.runner.abandon()
        self._thread.join(JOIN_TIMEOUT_S)
        sys.setswitchinterval(self._switch_interval)
