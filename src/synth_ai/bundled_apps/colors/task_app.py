"""color-quiz: a one-turn exact-answer task small enough for RL on a laptop CPU (the tiny local Qwen3 learns it).

The policy is asked "What color is the <thing>?" and answers in text. The reward is graded so that a group of
samples usually differs (GSPO learns nothing from a group whose rewards are all equal):
- 0.2 for the answer's shape, "The <word> is <word>." (one sentence, nothing else);
- 0.3 when the sentence names the thing asked about;
- 0.5 when the colour is the right one.
A perfect answer ("The sky is blue.") scores 1.0.

Env config: `things` (how many of the quiz's things the seeds cycle through, 1-10; default 1: every seed asks
about the sky); the seed picks the thing (`seed % things`). The tiny model barely conditions on the question, so
more things make a much harder task for it.
Policy config: `model`, `inference_url` (required), `temperature` (1.0), `max_tokens` (12), `top_p`, `timeout_s`
(60), `thinking_mode`, `thinking_budget`, `seed` (the model call's sampling seed).
"""

from __future__ import annotations

import re
from typing import Any

from synth_ai.taskapp import (
    DatasetInfo,
    InferenceInfo,
    LimitsInfo,
    RolloutError,
    RolloutMetrics,
    RolloutRequest,
    RolloutResponse,
    RolloutStep,
    RolloutTrajectory,
    RubricBundle,
    RubricInfo,
    TaskAppConfig,
    TaskAppEntry,
    TaskDescriptor,
    TaskInfo,
    chat_completion,
    normalize_inference_url,
    register_task_app,
)
from synth_ai.taskapp.tracing import correlation_id_of

APP_ID = "color-quiz"
TASK_ID = "color_quiz"
# The order matters: seeds cycle through the first `things` entries.
THINGS = (("sky", "blue"), ("grass", "green"), ("snow", "white"), ("sun", "yellow"), ("coal", "black"),
          ("blood", "red"), ("plum", "purple"), ("orange", "orange"), ("leaf", "green"), ("sea", "blue"))
DEFAULT_THINGS = 1
SHAPE = re.compile(r"^the ([a-z]+) is ([a-z]+)\.?$")
REWARD_SHAPE, REWARD_THING, REWARD_COLOR = 0.2, 0.3, 0.5


def grade(answer: str, thing: str, color: str) -> dict[str, Any]:
    """The graded reward of one answer and why."""
    text = " ".join(str(answer or "").strip().lower().split())
    match = SHAPE.match(text)
    named, said = (match.group(1), match.group(2)) if match else (None, None)
    if match is None:  # partial credit for the colour alone would reward rambling; only the shape earns it
        words = re.findall(r"[a-z]+", text)
        said = color if color in words else None
    shape_ok = match is not None
    thing_ok = named == thing
    color_ok = said == color and (shape_ok or len(text.split()) <= 4)
    reward = REWARD_SHAPE * shape_ok + REWARD_THING * thing_ok + REWARD_COLOR * color_ok
    return {"reward": round(reward, 4), "shape": shape_ok, "thing": thing_ok, "color": color_ok,
            "named": named, "said": said}


def _int(value: Any, name: str, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise RolloutError(f"{name} must be an integer, not {value!r}", status_code=400, code="invalid_config") from None
    if isinstance(value, bool) or not low <= number <= high:
        raise RolloutError(f"{name} must be an integer from {low} to {high}, not {value!r}", status_code=400,
                           code="invalid_config")
    return number


def question(seed: int, things: int) -> tuple[str, str]:
    return THINGS[seed % things]


BASE_TASK_INFO = TaskInfo(
    task=TaskDescriptor(id=TASK_ID, name="Color quiz", version="1.0.0",
                        description="Say the colour of a thing in one sentence: 'The sky is blue.'"),
    environment=TASK_ID,
    dataset=DatasetInfo(id=TASK_ID, name="Colour facts", version="1.0.0", splits=["train"], default_split="train"),
    rubric=RubricInfo(outcome={"criteria": "0.2 shape 'The X is Y.' + 0.3 names the thing + 0.5 right colour"}),
    inference=InferenceInfo(),
    limits=LimitsInfo(max_turns=1, max_response_tokens=12, timeout_seconds=60),
    observation={"type": "text", "fields": ["question"]},
)


def describe_taskset() -> dict[str, Any]:
    return {"id": TASK_ID, "name": "Color quiz", "splits": ["train"], "default_split": "train",
            "sizes": {"train": len(THINGS)}, "things": [t for t, _ in THINGS]}


def provide_task_instances(seeds: list[int]) -> list[TaskInfo]:
    infos = []
    for seed in seeds:
        thing, color = question(seed, DEFAULT_THINGS)
        info = BASE_TASK_INFO.model_copy(deep=True)
        info.task_metadata = {"seed": seed, "thing": thing, "answer": f"The {thing} is {color}."}
        infos.append(info)
    return infos


async def rollout(request: RolloutRequest, fastapi_request: Any = None) -> RolloutResponse:
    env_config = request.env.config or {}
    things = _int(env_config.get("things"), "env.config.things", DEFAULT_THINGS, 1, len(THINGS))
    seed = _int(request.env.seed if request.env.seed is not None else env_config.get("seed"), "env.seed", 0, 0,
                2**63 - 1)
    thing, color = question(seed, things)
    config = request.policy.config or {}
    if not config.get("inference_url"):
        raise RolloutError("policy.config.inference_url is required (an OpenAI-compatible chat-completions URL)",
                           status_code=400, code="missing_inference_url")
    inference_url = normalize_inference_url(str(config["inference_url"]))
    prompt = f"What color is the {thing}?"
    payload: dict[str, Any] = {"model": config.get("model"), "messages": [{"role": "user", "content": prompt}],
                               "temperature": config.get("temperature", 1.0),
                               "max_tokens": config.get("max_tokens", 12)}
    for key in ("top_p", "thinking_mode", "thinking_budget", "seed"):
        if config.get(key) is not None:
            payload[key] = config[key]
    timeout = float(config.get("timeout_s") or 60)
    completion = await chat_completion(inference_url, payload, timeout=timeout)
    answer = (completion["choices"][0].get("message") or {}).get("content") or ""
    graded = grade(answer, thing, color)
    reward = graded["reward"]
    obs = {"question": prompt, "thing": thing}
    step = RolloutStep(obs=obs, tool_calls=[], reward=reward, done=True, truncated=False,
                       info={"meta": {"inference_url": inference_url}, "answer": answer, "expected": color,
                             **graded})
    cid = correlation_id_of(inference_url)
    return RolloutResponse(
        run_id=request.run_id,
        trajectories=[RolloutTrajectory(env_id=f"{TASK_ID}:{thing}", policy_id=request.policy.policy_name or "policy",
                                        steps=[step], final={"observation": obs, "reward": reward}, length=1,
                                        inference_url=inference_url)],
        metrics=RolloutMetrics(episode_returns=[reward], mean_return=reward, num_steps=1, num_episodes=1,
                               outcome_score=1.0 if graded["color"] and graded["thing"] else 0.0,
                               details=graded),
        ops_executed=len(request.ops), trace_correlation_id=cid,
        pipeline_metadata={"trace_correlation_id": cid, "inference_url": inference_url},
    )


def build_config() -> TaskAppConfig:
    return TaskAppConfig(app_id=APP_ID, name="Color quiz",
                         description="One question per rollout; graded reward for 'The <thing> is <colour>.'",
                         base_task_info=BASE_TASK_INFO, describe_taskset=describe_taskset,
                         provide_task_instances=provide_task_instances, rollout=rollout,
                         rubrics=RubricBundle(outcome=BASE_TASK_INFO.rubric.outcome))


register_task_app(entry=TaskAppEntry(
    app_id=APP_ID, description="Colour quiz for RL on the tiny local model: graded reward, one turn.",
    config_factory=build_config, aliases=("colors", "color_quiz")))
