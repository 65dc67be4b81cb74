"""Sending the next iteration's rollouts while this one's update runs.

A task app works before its first policy call of an episode: it reads the `/rollout` request, builds and resets
the environment and renders the first observation. None of that depends on the policy's weights, so the loop
sends iteration k+1's rollouts as soon as iteration k's rollouts are in, with the rollout engine held
(`hold()`): the task app's policy calls arrive and queue, already tokenised, but nothing is sampled until the
update and the weight sync are done and the loop calls `release()`. Every token is therefore sampled from
exactly the weights it would have been without the overlap (same calls, same seeds, same samples); only the
task app's own work moves under the update, and the held calls start as one batch.

The loop prefetches only when the update is expected to be short (`PREFETCH_MAX_UPDATE_S`, and a tenth of the
rollout timeout): a held task app waits on its policy call for as long as the update runs, and task apps time out
their policy calls. The expectation is the last update's duration; before the first update (or the first after a
resume) it is `FIRST_UPDATE_FACTOR` times the rollouts just run, since an update over the samples costs about what
generating them did (one forward and backward over tokens generation produced one forward each). SYNTH_AI_RL_PREFETCH=0
turns it off.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from synth_ai.backend.inference.rollout_engine import RolloutEngine
from synth_ai.backend.trainers.rl.data_parallel import combine_rollouts, run_local_share
from synth_ai.backend.trainers.rl.types import Rollout

PREFETCH_ENV = "SYNTH_AI_RL_PREFETCH"
PREFETCH_MAX_UPDATE_S = 5.0
FIRST_UPDATE_FACTOR = 4.0  # the margin on "an update costs about its rollouts" while no update has been timed
JOIN_TIMEOUT_S = 30.0  # a cancelled prefetch ends at the runner's next stop poll; this only bounds a stuck one


def prefetch_allowed(settings: Any, engine: RolloutEngine, *, next_iteration: int, last_update_s: float | None,
                     rollouts_s: float | None = None) -> bool:
    """Whether the loop may send `next_iteration`'s rollouts during this iteration's update; `rollouts_s` (this
    iteration's rollouts, not overlapped) stands in for the update's duration while none has been timed."""
    if os.environ.get(PREFETCH_ENV, "1").strip() == "0":
        return False
    if next_iteration >= settings.iterations:
        return False
    if settings.eval_every and next_iteration % settings.eval_every == 0:
        return False  # the evaluation runs first, with the updated policy
    expected = last_update_s if last_update_s is not None else (
        None if rollouts_s is None else FIRST_UPDATE_FACTOR * rollouts_s)
    return expected is not None and expected <= min(PREFETCH_MAX_UPDATE_S, settings.rollout_timeout_s / 10)


class Prefetch:
    """Rollouts of `jobs` running in a thread of their own against a held engine; `release()` lets them sample,
    `result()` waits for them (combining the ranks' shares in the calling thread), `cancel()` abandons them."""

    def __init__(self, runner: Any, engine: RolloutEngine, jobs: list[tuple[int, int, str]], dp: Any, *,
                 mode: str) -> None:
        self.runner = runner
        self.engine = engine
        self.jobs = jobs
        self.dp = dp
        self.started = time.perf_counter()
        self.released: float | None = None
        self._outcome: tuple[list[Rollout], bool] | None = None
        self._error: BaseException | None = None
        engine.hold()
        self._thread = threading.Thread(target=self._run, args=(mode,), name="rl-rollout-prefetch", daemon=True)
        self._thread.start()

    def _run(self, mode: str) -> None:
        try:
            self._outcome = run_local_share(self.runner, self.jobs, self.dp, mode=mode)
        except BaseException as exc:  # noqa: BLE001 - handed to the loop's thread by result()
            self._error = exc

    def release(self) -> None:
        if self.released is None:
            self.released = time.perf_counter()
            self.engine.release()

    @property
    def overlapped_s(self) -> float:
        """How long the rollouts were in flight before the engine was released."""
        return (self.released or time.perf_counter()) - self.started

    def result(self) -> list[Rollout]:
        self.release()
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._outcome is not None
        return combine_rollouts(self.jobs, self.dp, *self._outcome)

    def cancel(self) -> None:
        """Abandon the rollouts (the loop is leaving): they are cancelled, the engine released, the thread joined."""
        self.runner.abandon()
        self.release()
        self._thread.join(JOIN_TIMEOUT_S)
