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

from synth_ai.backend.trainers.rl.advantages import InvalidRollout, read_rewards
from synth_ai.backend.trainers.rl.policy_exposure import policy_url
from synth_ai.backend.trainers.rl.rl_settings import RLSettings
from synth_ai.backend.trainers.rl.task_client import (
    TaskAppClient,
    TaskAppRequestFailed,
    TaskAppTimeout,
    TaskAppUnreachable,
)
from synth_ai.backend.trainers.rl.types import Rollout
from synth_ai.env.secrets import redact
from synth_ai.errors import InvalidInputError
from synth_ai.taskapp.inference import with_cid
from synth_ai.taskapp.reachability import unreachable_answer

RETRY_DELAYS_S = (0.5, 2.0, 5.0)
STOP_POLL_S = 0.25


class TaskAppUnavailable(RuntimeError):
    """Every rollout of an iteration failed to reach the task app (after retries)."""


def pick_environment_key(task_url: str, candidates: list[str], timeout: float = 10.0) -> str | None:
    """The first candidate the task app accepts on `/task_info`. Raises when it refuses every one (an auth answer,
    not an outage: the rollouts would all fail the same way). None when no key is known."""
    import httpx

    refused = 0
    with httpx.Client(timeout=timeout, follow_redirects=False) as client:
        for key in candidates:
            try:
                response = client.get(f"{task_url}/task_info", headers={"X-API-Key": key})
            except httpx.HTTPError:
                return key  # unreachable now: the rollouts report it (with retries)
            if response.status_code == 200:
                return key
            if not _is_auth_refusal(response):
                return key  # some other trouble: the rollouts will say what
            refused += 1
    if candidates and refused == len(candidates):
        raise InvalidInputError(
            f"The task app at {task_url} refused every ENVIRONMENT_API_KEY this backend knows ({refused}).",
            hint="Give the task app and the backend the same key: `synth-ai setup --local`, or set "
                 "ENVIRONMENT_API_KEY for both.")
    return candidates[0] if candidates else None


def _is_auth_refusal(response: Any) -> bool:
    """401/403, or the reference's 400 with error code `unauthorised`."""
    if response.status_code in (401, 403):
        return True
    if response.status_code != 400:
        return False
    try:
        detail = response.json().get("detail")
        return isinstance(detail, dict) and (detail.get("error") or {}).get("code") in ("unauthorised", "unauthorized")
    except (ValueError, AttributeError):
        return False


def rollout_request(settings: RLSettings, *, seed: int, cid: str, policy_url: str, mode: str,
                    extra_policy: dict[str, Any] | None = None) -> dict[str, Any]:
    policy = {**settings.policy_config, **(extra_policy or {})}
    policy.update({"model": settings.label or settings.model_id, "inference_url": with_cid(policy_url, cid),
                   "max_turns": settings.max_turns, "max_llm_calls": settings.max_turns})
    if "timeout_s" not in policy:
        policy["timeout_s"] = settings.rollout_timeout_s
    return {
        "run_id": cid,
        "env": {"env_name": settings.env_name, "config": dict(settings.env_config), "seed": seed},
        "policy": {"policy_name": settings.policy_name, "config": policy},
        "ops": list(settings.ops) or ["agent", "env"] * settings.max_turns,
        "record": {"trajectories": True, "logprobs": False, "value": False, "return_trace": False},
        "on_done": "reset",
        "safety": {"max_ops": 100000, "max_time_s": settings.rollout_timeout_s},
        "mode": mode,
    }


class RolloutRunner:
    def __init__(self, settings: RLSettings, engine: Any, api_key: str | None,
                 should_stop: Callable[[], bool]) -> None:
        self.settings = settings
        self.engine = engine
        self.api_key = api_key
        self.should_stop = should_stop
        self.policy_url = policy_url(engine)  # loopback, or a tunnel when the job runs on Modal
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
            headers = {"X-API-Key": self.api_key} if self.api_key else {}
            self._client = TaskAppClient(self.settings.task_url, headers, concurrency=self.settings.concurrency)
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
            retry = False
            async with gate:  # a slot per attempt: the back-off below leaves it to other rollouts
                try:
                    response = await client.post_json("/rollout", body, self.settings.rollout_timeout_s)
                except TaskAppTimeout:
                    response = None
                    result.error, result.error_kind, retry = (
                        f"/rollout did not answer within {self.settings.rollout_timeout_s:g}s", "timeout", True)
                except TaskAppUnreachable as exc:
                    response = None
                    result.error, result.error_kind, retry = (
                        f"could not reach the task app at {self.settings.task_url}: "
                        f"{redact(str(exc)) or 'no detail'}", "unreachable", True)
                except TaskAppRequestFailed as exc:
                    response = None
                    result.error, result.error_kind, retry = (
                        f"/rollout failed: {redact(str(exc)) or 'no detail'}", "transport", True)
            if response is not None:
                result.error, result.error_kind, retry = self._read(result, response, attempt_cid)
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

    def _read(self, result: Rollout, response: Any, cid: str) -> tuple[str | None, str | None, bool]:
        gateway = unreachable_answer(response.status_code, response.text)
        if gateway is not None:  # a proxy answered for an app that is not there
            return (f"could not reach the task app at {self.settings.task_url}: {gateway}", "unreachable", True)
        if response.status_code >= 500 or response.status_code == 429:
            return (f"/rollout answered HTTP {response.status_code}: {redact(response.text[:300])}", "http", True)
        if _is_auth_refusal(response):  # its body may list key fragments: not repeated in events
            return (f"/rollout answered HTTP {response.status_code}: the task app refused the ENVIRONMENT_API_KEY",
                    "http", False)
        if response.status_code >= 400:
            return (f"/rollout answered HTTP {response.status_code}: {redact(response.text[:300])}", "http", False)
        try:
            doc = response.json()
            read_rewards(result, doc, self.settings)
        except ValueError as exc:  # InvalidRollout is a ValueError; so is a body that is not JSON
            detail = str(exc) if isinstance(exc, InvalidRollout) else \
                f"not JSON: {redact(response.text[:200])!r}"
            return (f"/rollout answered 200 with an invalid rollout response ({detail})", "invalid_response", False)
        trajectories = doc.get("trajectories") if isinstance(doc, dict) else None
        result.steps = sum(len(t.get("steps") or []) for t in trajectories or [] if isinstance(t, dict))
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
