"""The rollout engine contract: every member the RL loop (`backend/trainers/rl/`) uses of the engine that serves the
policy to a task app while a job samples. Two engines implement it: `BuiltinRolloutEngine` (`policy_server.py`)
and `VllmRolloutEngine` (`vllm_engine.py`); `tests/test_rollout_engine_contract.py` checks both against this
protocol and that the RL loop reaches an engine through no other member.

Words: a *rollout engine* serves the policy being trained and records what it sampled; an *inference engine*
(`engine.InferenceEngine`, `vllm_serving.VllmInferenceEngine`) answers chat completions for the models of the store
(`/api/inference`), and each rollout engine runs one inside it for its own sampling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from synth_ai.backend.inference.runner import SampledTokens


@dataclass
class RecordedCall:
    """One LLM call of one episode: the request as sent and, per choice, the sampled tokens."""

    cid: str
    index: int  # order within the cid (turn number)
    request: dict[str, Any]
    samples: list[SampledTokens]


class EngineHold:
    """What `hold()` returns: the engine is held from the call on; leaving a `with` block (or `release()`) lets it
    sample again. Releasing twice is harmless."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release = release

    def __enter__(self) -> EngineHold:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._release()


@runtime_checkable
class RolloutEngine(Protocol):
    """Versions: `publish(v)` after the trainer's v-th optimiser step makes those weights the served ones and tags
    every token sampled from then on with `v`. `adapter_versions` maps each policy version to the LoRA adapter
    version that serves it (None: the engine serves no adapter). `failure` is set once the engine can sample no
    more (the attempt ends; the job resumes in a new worker). `bind_host` and `path_token` are set before `start()`
    when the policy is reached through a tunnel (`trainers/rl/policy_exposure.py`)."""

    version: int  # the policy version being served
    images_dropped: int  # images left out of requests over `max_images` since the loop last read it (it resets it)
    adapter_versions: dict[int, int] | None
    bind_host: str
    path_token: str | None

    @property
    def failure(self) -> BaseException | None: ...

    def start(self) -> str: ...  # the chat-completions URL to hand to task apps (without ?cid=)

    def close(self) -> None: ...  # stop serving and free the engine; calls in flight get no answer

    def sync_weights(self) -> None: ...  # sample from the trainer's current weights, at the current version

    def publish(self, version: int) -> None: ...  # sync_weights(), then tag new tokens with `version`

    def take_calls(self, cid: str) -> list[RecordedCall]: ...  # the rollout's calls; later ones go unrecorded

    def hold(self) -> EngineHold: ...  # queue calls but sample nothing until release() / the end of `with`

    def release(self) -> None: ...


VersionedRolloutEngine = RolloutEngine  # its former name, when `publish` was not yet part of every engine
