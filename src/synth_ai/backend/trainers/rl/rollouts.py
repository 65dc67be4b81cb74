"""Calling the task app: `/rollout` requests in the reference's shape (§5.3), concurrency, timeouts, retries, and
the accounting of rollouts that fail.

Each rollout gets its own correlation id; the policy URL handed to the task app is the rollout engine's
chat-completions URL with `?cid=<id>`, so every LLM call of the episode is recorded under it. A rollout that cannot
reach the app, times out, or gets a 5xx is retried (a fresh cid each attempt, the failed attempt's calls dropped);
a 4xx or an answer that is not a rollout response is not retried. A rollout that still fails is excluded from
training and counted, never scored 0; one that could not reach the app (`error_kind` "unreachable", the rule of
`synth_ai.taskapp.reachability`) is run again by the loop once the app is back (`rl.taskapp_wait`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from synth_ai.backend.inference.rollout_engine import RolloutEngine
from synth_ai.backend.trainers.rl.advantages import read_rewards
from synth_ai.backend.trainers.rl.policy_exposure import policy_url
from synth_ai.backend.trainers.rl.rl_settings import RLSettings
from synth_ai.backend.trainers.rl.types import Rollout
from synth_ai.errors import InvalidInputError
from synth_ai.taskapp.client import RolloutAnswer, TaskAppClient, run_sync
from synth_ai.taskapp.contracts import RolloutRequest
from synth_ai.taskapp.failures import (
    TaskAppFailure,
    TaskAppHTTPError,
    TaskAppInvalidResponse,
    TaskAppTimeout,
    TaskAppUnreachable,
)
from synth_ai.taskapp.inference import with_cid

RETRY_DELAYS_S = (0.5, 2.0, 5.0)
STOP_POLL_S = 0.25


class TaskAppUnavailable(RuntimeError):
    """Every rollout of an iteration failed to reach the task app (after retries)."""


def pick_environment_key(task_url: str, candidates: list[str], timeout: float = 10.0) -> str | None:
    """The first candidate the task app accepts on `/task_info`. Raises when it refuses every one (an auth answer,
    not an outage: the rollouts would all fail the same way). None when no key is known."""
    refused = run_sync(_count_refusals(task_url, candidates, timeout))
    if isinstance(refused, str):
        return refused
    if candidates and refused == len(candidates):
        raise InvalidInputError(
            f"The task app at {task_url} refused every ENVIRONMENT_API_KEY this backend knows ({refused}).",
            hint="Give the task app and the backend the same key: `synth-ai setup --local`, or set "
                 "ENVIRONMENT_API_KEY for both.")
    return candidates[0] if candidates else None


async def _count_refusals(task_url: str, candidates: list[str], timeout: float) -> str | int:
    """The first key to keep (accepted, or the app is away or in other trouble: the rollouts report that, with
    retries), else how many keys the app refused."""
    refused = 0
    async with TaskAppClient(task_url) as app:
        for key in candidates:
            try:
                await app.get("/task_info", headers={"X-API-Key": key}, timeout_s=timeout)
            except TaskAppHTTPError as exc:
                if exc.auth_refused:
                    refused += 1
                    continue
            except TaskAppFailure:
                pass  # unreachable now: the rollouts report it (with retries)
            return key
    return refused


def rollout_request(settings: RLSettings, *, seed: int, cid: str, policy_url: str, mode: str,
                    extra_policy: dict[str, Any] | None = None) -> RolloutRequest:
    """The trainer's `/rollout` request (the reference's shape, §5.3: `record`, `on_done` and `safety` spelt out)."""
    policy = {**settings.policy_config, **(extra_policy or {})}
    policy.update({"model": settings.label or settings.model_id, "inference_url": with_cid(policy_url, cid),
                   "max_turns": settings.max_turns, "max_llm_calls": settings.max_turns})
    if "timeout_s" not in policy:
        policy["timeout_s"] = settings.rollout_timeout_s
    return RolloutRequest.model_validate({
        "run_id": cid,
        "env": {"env_name": settings.env_name, "config": dict(settings.env_config), "seed": seed},
        "policy": {"policy_name": settings.policy_name, "config": policy},
        "ops": list(settings.ops) or ["agent", "env"] * settings.max_turns,
        "record": {"trajectories": True, "logprobs": False, "value": False, "return_trace": False},
        "on_done": "reset",
        "safety": {"max_ops": 100000, "max_time_s": settings.rollout_timeout_s},
        "mode": mode,
    })


class RolloutRunner:
    def __init__(self, settings: RLSettings, engine: RolloutEngine | None, api_key: str | None,
                 should_stop: Callable[[], bool], *, url: str | None = None) -> None:
        """`engine` serves the policy and records its calls; the rollout child has none, only the `url` of the
        engine its parent started."""
        self.settings = settings
        self.engine = engine
        self.api_key = api_key
        self.should_stop = should_stop
        # loopback, or a tunnel when the job runs on Modal
        self.policy_url = url if url is not None else policy_url(engine)
        self._client: TaskAppClient | None = None  # kept across iterations where it can be (its connections)
        self._abandoned = False

    def abandon(self) -> None:
        """The run in flight (a prefetch, in another thread) cancels its rollouts at its next poll, and this runner
        starts no more."""
        self._abandoned = True

    def _stopping(self) -> bool:
        return self._abandoned or self.should_stop()

    def run(self, jobs: list[tuple[int, int, str]], *, mode: str, extra_policy: dict[str, Any] | None = None
            ) -> list[Rollout]:
        """Run (seed, index, cid) rollouts, at most `concurrency` at once; results in the order given."""
        return asyncio.run(self._run_all(jobs, mode, extra_policy))

    async def _run_all(self, jobs: list[tuple[int, int, str]], mode: str,
                       extra_policy: dict[str, Any] | None) -> list[Rollout]:
        gate = asyncio.Semaphore(self.settings.concurrency)
        if self._client is None or not self._client.reusable:  # httpx clients belong to one event loop
            self._client = TaskAppClient(self.settings.task_url, api_key=self.api_key,
                                         concurrency=self.settings.concurrency)
        client = self._client
        try:
            tasks = [asyncio.create_task(self._one(client, gate, seed, index, cid, mode, extra_policy))
                     for seed, index, cid in jobs]
            pending = set(tasks)
            while pending:
                _done, pending = await asyncio.wait(pending, timeout=STOP_POLL_S)
                if pending and self._stopping():
                    for task in pending:
                        task.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    raise RolloutsStopped()
            return [task.result() for task in tasks]
        finally:
            if not client.reusable:
                await client.aclose()
                self._client = None

    async def _one(self, client: TaskAppClient, gate: asyncio.Semaphore, seed: int, index: int, cid: str, mode: str,
                   extra_policy: dict[str, Any] | None) -> Rollout:
        result = Rollout(seed=seed, index=index, cid=cid)
        for attempt in range(self.settings.rollout_retries + 1):
            attempt_cid = cid if attempt == 0 else f"{cid}-r{attempt}"
            result.attempts = attempt + 1
            result.attempt_cids.append(attempt_cid)
            body = rollout_request(self.settings, seed=seed, cid=attempt_cid, policy_url=self.policy_url,
                                   mode=mode, extra_policy=extra_policy)
            async with gate:  # a slot per attempt: the back-off below leaves it to other rollouts
                try:
                    answer = await client.rollout(body, timeout_s=self.settings.rollout_timeout_s)
                except TaskAppFailure as exc:
                    result.error, result.error_kind, retry = self._failed(exc)
                else:
                    result.error, result.error_kind, retry = self._read(result, answer)
            self._settle(result, attempt_cid)
            if result.error is None:
                return result
            if not retry or attempt >= self.settings.rollout_retries or self._stopping():
                break
            await asyncio.sleep(RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)])
        result.reward = None
        return result

    def _settle(self, result: Rollout, cid: str) -> None:
        """The engine forgets `cid` (a timed-out attempt's late calls are answered, not recorded); a result without
        error gets the calls recorded under it."""
        attach_calls(result, self.engine.take_calls(cid))

    def _failed(self, exc: TaskAppFailure) -> tuple[str, str, bool]:
        """(error, error_kind, retry) of an attempt without a usable answer: an outage, a timeout, a 5xx or 429 and
        a transport error are retried; a 4xx or an invalid answer is not."""
        if isinstance(exc, TaskAppTimeout):
            return f"/rollout did not answer within {self.settings.rollout_timeout_s:g}s", "timeout", True
        if isinstance(exc, TaskAppUnreachable):
            return (f"could not reach the task app at {self.settings.task_url}: {exc.reason or 'no detail'}",
                    "unreachable", True)
        if isinstance(exc, TaskAppHTTPError):
            if exc.auth_refused:  # its body may list key fragments: not repeated in events
                return (f"/rollout answered HTTP {exc.status_code}: the task app refused the ENVIRONMENT_API_KEY",
                        "http", False)
            retry = exc.status_code >= 500 or exc.status_code == 429
            return f"/rollout answered HTTP {exc.status_code}: {exc.excerpt}", "http", retry
        if isinstance(exc, TaskAppInvalidResponse):
            return f"/rollout answered 200 with an invalid rollout response ({exc.reason})", "invalid_response", False
        return f"/rollout failed: {exc.reason or 'no detail'}", "transport", True

    def _read(self, result: Rollout, answer: RolloutAnswer) -> tuple[str | None, str | None, bool]:
        try:
            read_rewards(result, answer.doc, self.settings)
        except ValueError as exc:  # InvalidRollout, or a value that is not a number
            return f"/rollout answered 200 with an invalid rollout response ({exc})", "invalid_response", False
        result.steps = answer.step_count
        return None, None, False


def attach_calls(result: Rollout, calls: list[Any]) -> None:
    """A succeeded attempt's recorded LLM calls onto its result; none at all is the `no_calls` failure."""
    if result.error is not None:
        return
    result.calls = calls
    if not calls:
        result.error, result.error_kind = ("the task app never called the policy's inference_url (with its ?cid=)",
                                           "no_calls")
        result.reward = None


class RolloutsStopped(Exception):
    """should_stop() answered True while rollouts were in flight; they were cancelled."""
