"""Running the seeds: `concurrency` rollouts in flight, each bounded by its own deadline, each finished seed
scored and its session written at once (one transaction), so an interrupted run keeps every seed that finished.

A seed whose `/rollout` fails (HTTP error, a body that is not a rollout response) is `error`; one past its deadline
is `timeout`. Neither gets a score: they are reported as what they are, never as 0. A seed that cannot reach the app
(`synth_ai.taskapp.reachability`: no connection, or a gateway's 502/503/504) waits for it and is sent again once it
answers, for at most `[eval].task_app_wait_s` from the first failure; past it the seed is an `error` saying so.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from synth_ai.env.secrets import redact
from synth_ai.eval.judges import Judge
from synth_ai.eval.policy import InferenceTarget, rollout_request
from synth_ai.eval.scoring import official_score, outcome_score, reward_components, reward_weights
from synth_ai.eval.traces import session_for, task_facts
from synth_ai.taskapp.client import RolloutAnswer, TaskAppClient
from synth_ai.taskapp.contracts import RolloutRequest
from synth_ai.taskapp.failures import (
    TaskAppFailure,
    TaskAppHTTPError,
    TaskAppInvalidResponse,
    TaskAppTimeout,
    TaskAppUnreachable,
)
from synth_ai.taskapp.reachability import TaskAppOutage

OK, ERROR, TIMEOUT = "ok", "error", "timeout"
_ERROR_CHARS = 300
WAIT_KEY = "[eval].task_app_wait_s"


@dataclass
class SeedResult:
    seed: int
    status: str  # ok | error | timeout
    elapsed_s: float
    official_score: float | None = None
    outcome_score: float | None = None
    judge_scores: dict[str, float | None] = field(default_factory=dict)
    judge_errors: dict[str, str] = field(default_factory=dict)
    reward_components: dict[str, float] = field(default_factory=dict)  # per reward function, where the app says
    task_id: str | None = None
    http_status: int | None = None
    error: str | None = None
    session_id: str | None = None
    stored: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != {}}


@dataclass
class RunSpec:
    model: str
    split: str
    cfg: dict[str, Any]
    target: InferenceTarget | None  # set once resolved (see flow)
    concurrency: int
    rollout_timeout: float
    judges: list[Judge]
    app_id: str | None
    eval_run_id: str = field(default_factory=lambda: f"eval_{uuid.uuid4().hex[:12]}")
    outage: TaskAppOutage | None = None  # set once the app is open (see flow); None: no waiting
    say: Callable[[str], None] = lambda text: None  # progress lines: waiting for the app, and its return


async def run_seed(client: Any, spec: RunSpec, seed: int, store: Any,
                   late: Callable[[SeedResult], None] | None = None) -> SeedResult:
    """One seed's rollout, scores and stored session. `late` gets the result of a seed interrupted (cancelled)
    while its session was being written: the write completes anyway, so the seed did finish."""
    request = rollout_request(seed=seed, model=spec.model, split=spec.split, cfg=spec.cfg, target=spec.target)
    started = time.perf_counter()

    def done(status: str, **kw: Any) -> SeedResult:
        return SeedResult(seed, status, round(time.perf_counter() - started, 3), **kw)

    answer = await _post_rollout(client, spec, seed, request)
    if isinstance(answer, SeedFailure):
        return done(answer.status, http_status=answer.http_status, error=answer.error)
    data = answer.doc
    facts = task_facts(data, spec.split)
    official, outcome, components = official_score(data), outcome_score(data), reward_components(data)
    judge_scores, judge_errors = await _judge(spec.judges, seed, facts, data)
    result = done(OK, http_status=answer.status_code, official_score=official, outcome_score=outcome,
                  judge_scores=judge_scores, judge_errors=judge_errors, reward_components=components,
                  task_id=facts.task_id)
    if store is not None:
        extra = {"app_id": spec.app_id, "eval_run_id": spec.eval_run_id, "run_id": request.run_id,
                 "source": "synth-ai eval"}
        if components:  # stored only for the apps that report them: the others' metadata stays as it was
            extra.update(reward_components=components, reward_weights=reward_weights(data, components))
        session = session_for(data, seed=seed, model=spec.model, facts=facts, official=official, outcome=outcome,
                              judge_scores=judge_scores, extra=extra)
        write = asyncio.get_running_loop().run_in_executor(None, store.write, session)
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:  # Ctrl-C mid-write: the thread still commits the whole session
            if late is not None:
                write.add_done_callback(lambda w: _report_late_write(w, result, session.session_id, late))
            raise
        except (OSError, sqlite3.Error) as exc:  # the rollout ran but is not kept: not a finished seed
            result.status, result.error = ERROR, f"trace not stored in {store.path}: {type(exc).__name__}: {exc}"
            return result
        result.session_id, result.stored = session.session_id, True
    return result


@dataclass(frozen=True)
class SeedFailure:
    """A seed's `/rollout` that gave no usable answer: its status (`error`, `timeout`) and what went wrong."""

    status: str
    error: str
    http_status: int | None = None


async def _post_rollout(client: Any, spec: RunSpec, seed: int, request: RolloutRequest) -> RolloutAnswer | SeedFailure:
    """The app's answer to the seed's `/rollout` (one with a `trajectories` list), or why the seed failed. An app
    that cannot be reached is waited for (`spec.outage`) and asked again."""
    app = TaskAppClient(str(client.base_url), http=client)
    while True:
        try:
            answer = (await asyncio.wait_for(app.rollout(request), spec.rollout_timeout)).require_trajectories()
        except TaskAppUnreachable as exc:
            why = exc.reason
        except (TimeoutError, TaskAppTimeout):
            return SeedFailure(TIMEOUT, f"no answer within {spec.rollout_timeout:g}s")
        except TaskAppFailure as exc:
            if isinstance(exc, (TaskAppHTTPError, TaskAppInvalidResponse)) and spec.outage is not None:
                spec.outage.end()  # the app itself answered
            return _seed_failure(exc)
        else:
            if spec.outage is not None:
                spec.outage.end()
            return answer
        if spec.outage is None or spec.outage.window_s <= 0:
            return SeedFailure(ERROR, why[:_ERROR_CHARS])
        if not await _wait_for_app(spec.outage, seed, why, spec.say):
            return SeedFailure(ERROR, spec.outage.give_up_reason(WAIT_KEY)[:_ERROR_CHARS])


def _seed_failure(exc: TaskAppFailure) -> SeedFailure:
    """An answer that is an error (the app's own message when it sent one), one that is not a rollout response,
    or a request that failed on the way."""
    if isinstance(exc, TaskAppHTTPError):
        return SeedFailure(ERROR, f"HTTP {exc.status_code}: {exc.detail}"[:_ERROR_CHARS], exc.status_code)
    if isinstance(exc, TaskAppInvalidResponse):
        return SeedFailure(ERROR, "the task app answered 200 with something that is not a rollout response",
                           exc.status_code)
    return SeedFailure(ERROR, exc.reason[:_ERROR_CHARS] or type(exc).__name__)


async def _wait_for_app(outage: TaskAppOutage, seed: int, why: str, say: Callable[[str], None]) -> bool:
    if outage.begin(why):
        say(f"The task app at {outage.url} cannot be reached ({why}); seed {seed} waits for it, "
            f"{outage.remaining_s():.0f}s at most ({WAIT_KEY}).")
    back = await outage.wait()
    if back and outage.tell_back():
        say(f"The task app at {outage.url} answers again after {outage.waited_s():.0f}s; the seeds that could not "
            "reach it are sent again.")
    return back


def _report_late_write(write: asyncio.Future, result: SeedResult, session_id: str,
                       late: Callable[[SeedResult], None]) -> None:
    if not write.cancelled() and write.exception() is None:
        result.session_id, result.stored = session_id, True
        late(result)


async def _judge(judges: list[Judge], seed: int, facts: Any, data: dict[str, Any]) -> tuple[dict, dict]:
    scores: dict[str, float | None] = {}
    errors: dict[str, str] = {}
    payload = {"seed": seed, "prompt_index": facts.prompt_index, "prompt": facts.prompt,
               "completion": facts.completion, "metrics": data.get("metrics"), "response": data,
               "trace": data.get("trace")}
    for judge in judges:
        try:
            scores[judge.name] = await asyncio.to_thread(judge.score, payload)
        except Exception as exc:  # a judge's failure is that judge's missing score, reported
            scores[judge.name] = None
            errors[judge.name] = redact(f"{type(exc).__name__}: {exc}")[:_ERROR_CHARS]
    return scores, errors


async def run_all(client: Any, spec: RunSpec, seeds: list[int], store: Any,
                  on_result: Callable[[SeedResult], None]) -> list[SeedResult]:
    """Every seed, at most `spec.concurrency` at once; results in seed order. `on_result` sees each as it ends."""
    queue = list(enumerate(seeds))
    results: list[SeedResult | None] = [None] * len(seeds)

    async def worker() -> None:
        while queue:
            position, seed = queue.pop(0)
            result = await run_seed(client, spec, seed, store, late=on_result)
            results[position] = result
            on_result(result)

    await asyncio.gather(*(worker() for _ in range(min(spec.concurrency, len(seeds)))))
    return [r for r in results if r is not None]
