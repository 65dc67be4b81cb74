"""Submitting a prepared training run: the local checks (the dataset, the task app's key), then the backend's
say on whether it can train (`Hooks.preflight`), then the plan's steps (`synth_ai.train.plan`), executed in the
order `--dry-run` prints them. SFT: upload → wait ready → create → start (`sft_steps`); RL: check the task app
locally → share its ENVIRONMENT_API_KEY with the backend, sealed → verify it through the backend → create
(`rl_steps`). Following the job is `synth_ai.client.follow`.

Every create carries an idempotency key remembered per logical operation (`client/idempotency.py`), so running
the same command again after a crash, a timeout or Ctrl-C finds the same file and the same job.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from synth_ai.client.idempotency import IdempotencyStore
from synth_ai.client.resources import SynthAPI
from synth_ai.train.prepare import PreparedTraining
from synth_ai.train.rl_steps import RlSteps
from synth_ai.train.sft_steps import SftSteps
from synth_ai.train.submission import Hooks, Submitted

__all__ = ["Hooks", "Submitted", "submit"]


def submit(prepared: PreparedTraining, api: SynthAPI, *, idempotency: str | None, examples: int | None,
           hooks: Hooks, store: IdempotencyStore | None = None, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> Submitted:
    store = store or IdempotencyStore()
    runner: SftSteps | RlSteps
    if prepared.config.kind == "sft":
        runner = SftSteps(prepared, api, idempotency=idempotency, examples=examples, hooks=hooks, store=store,
                          clock=clock, sleep=sleep)
    else:
        runner = RlSteps(prepared, api, idempotency=idempotency, hooks=hooks, store=store)
    with runner:  # entering runs the local checks: nothing is sent when they fail
        hooks.preflight()  # can this backend train at all? (before anything is uploaded, shared or created)
        actions = runner.actions()
        done: list[str] = []
        for step in prepared.plan.requests:
            actions[step.name]()
            done.append(step.name)
        submitted = runner.submitted()
    submitted.steps = done
    return submitted
