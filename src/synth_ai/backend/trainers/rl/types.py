"""What one RL iteration produces: rollouts (one episode each, with its LLM calls) and the samples GSPO trains."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Rollout:
    """One episode: seed `seed`, member `index` of its group; `reward` is None when it failed (never scored 0).
    `reward` is first the rubric-weighted episode reward; `build_samples` replaces it by the blended return (step
    rewards and judge included) that the advantages came from."""

    seed: int
    index: int
    cid: str
    reward: float | None = None
    error: str | None = None
    error_kind: str | None = None  # timeout | unreachable | http | invalid_response | no_calls
    calls: list[Any] = field(default_factory=list)  # policy_server.RecordedCall, in turn order
    steps: int = 0
    attempts: int = 0
    attempt_cids: list[str] = field(default_factory=list)  # the cid of each attempt, the last one's calls kept
    images_dropped: int = 0
    parts: dict[str, float] = field(default_factory=dict)  # env, event, outcome (advantages.reward_parts)
    step_rewards: list[float] = field(default_factory=list)  # r_t per turn when step rewards are on
    judge: dict[str, float] = field(default_factory=dict)  # judge score per kind (outcome, event) that it gave
    response: Any = None  # the /rollout answer, kept only while a judge still has to read it

    @property
    def ok(self) -> bool:
        return self.error is None and self.reward is not None


@dataclass
class Sample:
    """One sampled completion of one LLM call: the unit the GSPO ratio is taken over (its tokens only)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]  # under the sampling policy, one per completion token
    advantage: float
    temperature: float = 1.0
    vision_inputs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    rollout_index: int = 0
    turn: int = 0
    forced: list[bool] = field(default_factory=list)  # per completion token: context only, no loss
    sampler_logprobs: list[float] = field(default_factory=list)  # as recorded (old_logprobs may be recomputed)
    versions: list[int] = field(default_factory=list)  # per completion token: the policy version that sampled it
    adapter_version: int | None = None  # the vLLM LoRA adapter version that sampled it (None: no adapter)

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)
