"""bench-prose: the one-turn task of the mid-size GSPO bench (`bench/rl_step.py --size mid`).

The policy is asked to continue a short passage of made-up prose (drawn from the lexicon the mid model's tokenizer
was trained on, `synth_ai.backend.ml.mid.mid_prose`) and its reply is scored by its own letters: the reward is the
share of the reply's letters that are vowels. A random-weight model writes different text in every sample, so the
rewards of a group differ from the very first iteration and every iteration runs its backward pass, on our side
and on TRL's alike (a quiz a random model never answers gives all-zero groups, which our trainer skips).

The bench's TRL side imports `prompt_for` and `vowel_share` from here, so both sides ask the same questions and
grade the same way. Env config: none; the seed picks the passage. Policy config: `model`, `inference_url`
(required), `temperature` (1.0), `max_tokens` (128).
"""

from __future__ import annotations

import functools
import random
from typing import Any

from synth_ai.taskapp import (
    InferenceInfo,
    LimitsInfo,
    RolloutError,
    RolloutMetrics,
    RolloutRequest,
    RolloutResponse,
    RolloutStep,
    RolloutTrajectory,
    TaskAppConfig,
    TaskAppEntry,
    TaskDescriptor,
    TaskInfo,
    chat_completion,
    normalize_inference_url,
    register_task_app,
)
from synth_ai.taskapp.tracing import correlation_id_of

APP_ID = "bench-prose"
TASK_ID = "bench_prose"
PASSAGE_WORDS = 24
VOWELS = frozenset("aeiouAEIOU")


@functools.lru_cache(maxsize=1)
def _prose() -> Any:
    from synth_ai.backend.ml.mid import mid_prose

    return mid_prose()


def prompt_for(seed: int) -> str:
    passage = _prose().paragraph(random.Random(seed), PASSAGE_WORDS)
    return f"Continue this story: {passage}"


def vowel_share(text: str) -> float:
    """The share of `text`'s letters that are vowels (0.0 when it has none)."""
    letters = [c for c in text if c.isalpha()]
    return round(sum(c in VOWELS for c in letters) / len(letters), 6) if letters else 0.0


BASE_TASK_INFO = TaskInfo(
    task=TaskDescriptor(id=TASK_ID, name="Bench prose", version="1.0.0",
                        description="Continue a passage; the reward is the reply's share of vowels."),
    environment=TASK_ID, inference=InferenceInfo(), limits=LimitsInfo(max_turns=1, max_response_tokens=128),
    observation={"type": "text", "fields": ["prompt"]},
)


async def rollout(request: RolloutRequest, fastapi_request: Any = None) -> RolloutResponse:
    seed = int(request.env.seed or 0)
    config = request.policy.config or {}
    if not config.get("inference_url"):
        raise RolloutError("policy.config.inference_url is required", status_code=400, code="missing_inference_url")
    inference_url = normalize_inference_url(str(config["inference_url"]))
    prompt = prompt_for(seed)
    payload = {"model": config.get("model"), "messages": [{"role": "user", "content": prompt}],
               "temperature": config.get("temperature", 1.0), "max_tokens": config.get("max_tokens", 128)}
    completion = await chat_completion(inference_url, payload, timeout=float(config.get("timeout_s") or 600))
    answer = (completion["choices"][0].get("message") or {}).get("content") or ""
    reward = vowel_share(answer)
    obs = {"prompt": prompt}
    step = RolloutStep(obs=obs, tool_calls=[], reward=reward, done=True, truncated=False,
                       info={"meta": {"inference_url": inference_url}, "answer": answer})
    cid = correlation_id_of(inference_url)
    return RolloutResponse(
        run_id=request.run_id,
        trajectories=[RolloutTrajectory(env_id=f"{TASK_ID}:{seed}", policy_id=request.policy.policy_name or "policy",
                                        steps=[step], final={"observation": obs, "reward": reward}, length=1,
                                        inference_url=inference_url)],
        metrics=RolloutMetrics(episode_returns=[reward], mean_return=reward, num_steps=1, num_episodes=1),
        ops_executed=len(request.ops), trace_correlation_id=cid,
        pipeline_metadata={"trace_correlation_id": cid, "inference_url": inference_url},
    )


def build_config() -> TaskAppConfig:
    return TaskAppConfig(app_id=APP_ID, name="Bench prose", description="Continue a passage; reward = vowel share.",
                         base_task_info=BASE_TASK_INFO, describe_taskset=lambda: {"id": TASK_ID},
                         provide_task_instances=lambda seeds: [BASE_TASK_INFO for _ in seeds], rollout=rollout)


register_task_app(entry=TaskAppEntry(app_id=APP_ID, description="The mid-size GSPO bench's task: vowel-share reward.",
                                     config_factory=build_config))
