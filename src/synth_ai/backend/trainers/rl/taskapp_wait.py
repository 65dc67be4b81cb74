"""Riding out a task app that cannot be reached: the RL loop's side of `synth_ai.taskapp.reachability` (which says
what counts as unreachable, and waits with backoff).

- At the worker's start (a new job, or one resumed after a backend restart) the app is probed once; an app that
  is not there is waited for before anything is sent to it (the ENVIRONMENT_API_KEY is chosen only once it
  answers: an app that is down refuses no key, so the choice would be blind).
- Rollouts of an iteration, or of an evaluation, that could not reach the app are run again once it answers, with
  fresh cids (`<cid>-w<n>`; the engine records no calls under a cid it settled): the job goes on from the same
  iteration, with every rollout it would have had. The app is probed first: rollouts that failed during an outage
  that is already over (asynchronous batches collected after the app came back) are sent again at once, so one
  outage is one `waiting`/`back` pair.
- The wait lasts at most `[training].task_app_wait_s` (default 300 s) from the first failure until a request gets
  through again; past it the job fails with `TaskAppUnavailable` and the reason. 0 turns the wait off: an
  iteration whose rollouts all fail to reach the app then fails the job at once.

Events (rank 0 reports): `rl.taskapp.waiting` (warning: why, the iteration, how long at most) and `rl.taskapp.back`
(how long it was away, the rollouts sent again). Under torchrun rank 0 waits and hands every rank the outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from synth_ai.backend.trainers.rl.data_parallel import from_main, run_rollouts
from synth_ai.backend.trainers.rl.rl_settings import RLSettings
from synth_ai.backend.trainers.rl.rollouts import RolloutsStopped, TaskAppUnavailable
from synth_ai.backend.trainers.rl.types import Rollout
from synth_ai.taskapp.reachability import TaskAppOutage, WaitStopped, probe_health

WAIT_KEY = "[training].task_app_wait_s"


class TaskAppWait:
    def __init__(self, settings: RLSettings, dp: Any, reporter: Any, should_stop: Callable[[], bool]) -> None:
        self.settings, self.dp, self.reporter, self.should_stop = settings, dp, reporter, should_stop
        self.outage = TaskAppOutage(settings.task_url, settings.task_app_wait_s)
        self.reruns = 0

    @property
    def on(self) -> bool:
        return self.outage.window_s > 0

    def before_start(self, it: int) -> None:
        """Wait for an app that does not answer when the worker starts (resuming at iteration `it`)."""
        if not self.on:
            return
        why = from_main(self.dp, asyncio.run(_probe_once(self.settings.task_url)) if self.dp.main else None)
        if why is not None:
            self._wait(why, it, {"when": "start"}, f"the job waits for it before iteration {it}")

    def settle(self, runner: Any, jobs: list[tuple[int, int, str]], rollouts: list[Rollout], *, it: int, mode: str,
               extra_policy: dict[str, Any] | None = None) -> list[Rollout]:
        """`rollouts` (of `jobs`, in their order) with those that could not reach the app run again once it
        answers. Raises TaskAppUnavailable past the window, RolloutsStopped on a stop during the wait."""
        if not self.on:
            return rollouts
        rollouts = list(rollouts)
        while True:
            lost = [i for i, r in enumerate(rollouts) if r.error_kind == "unreachable"]
            if not lost:
                self.outage.end()
                return rollouts
            what = f"{len(lost)} of {len(rollouts)} {'eval ' if mode == 'eval' else ''}rollouts of iteration {it}"
            self._wait(rollouts[lost[0]].error or "no answer", it,
                       {"when": mode, "rollouts": len(lost), "total": len(rollouts)}, f"{what} wait for it")
            self.reruns += 1
            again = [(seed, member, f"{cid}-w{self.reruns}") for seed, member, cid in (jobs[i] for i in lost)]
            for i, result in zip(lost, run_rollouts(runner, again, self.dp, mode=mode, extra_policy=extra_policy),
                                 strict=True):
                rollouts[i] = result

    def _wait(self, why: str, it: int, data: dict[str, Any], waiting: str) -> None:
        url = self.settings.task_url
        if from_main(self.dp, asyncio.run(_probe_once(url)) if self.dp.main else None) is None:
            # The app answers now: these rollouts were sent during an outage that is over (an asynchronous
            # batch collected after the one that saw it end). Sent again without a second waiting/back pair.
            return
        data = {"iteration": it, "task_url": url, "reason": why, "window_s": self.outage.window_s, **data}
        if self.outage.begin(why):
            self.reporter.event("rl.taskapp.waiting",
                                f"The task app at {url} cannot be reached ({why}); {waiting}, "
                                f"{self.outage.remaining_s():.0f}s at most ({WAIT_KEY}).", data, level="warning")
        outcome, reason = from_main(self.dp, self._probe_until_back() if self.dp.main else None)
        if outcome == "stopped":
            raise RolloutsStopped()
        if outcome == "gave_up":
            raise TaskAppUnavailable(reason)
        waited = self.outage.waited_s()
        self.reporter.event("rl.taskapp.back",
                            f"The task app at {url} answers again after {waited:.0f}s; iteration {it} goes on.",
                            {**data, "waited_s": round(waited, 3)})

    def _probe_until_back(self) -> tuple[str, str | None]:
        try:
            back = asyncio.run(self.outage.wait(self.should_stop))
        except WaitStopped:
            return "stopped", None
        return ("back", None) if back else ("gave_up", self.outage.give_up_reason(WAIT_KEY))


async def _probe_once(url: str) -> str | None:
    import httpx

    async with httpx.AsyncClient(base_url=url, follow_redirects=False) as client:
        return await probe_health(client)
