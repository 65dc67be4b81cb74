"""The GSPO bench's task app, written with our task-app SDK like any user's: one turn, a prompt chosen by the seed,
the policy's answer scored by `gpu_inputs.gspo_reward` (any text scores, so groups differ at random init).

Policy config: `inference_url` (set by the trainer), `max_tokens`, `temperature`. The trainer serves it over HTTP
(uvicorn), as a real job's task app is.
"""

from __future__ import annotations

from typing import Any

from gpu_inputs import gspo_prompt, gspo_reward

APP_ID = "gpu-kit-bench"
TASK_ID = "gpu_kit_bench"


def build_config() -> Any:
    from synth_ai.taskapp import (
        DatasetInfo,
        InferenceInfo,
        LimitsInfo,
        RolloutMetrics,
        RolloutRequest,
        RolloutResponse,
        RolloutStep,
        RolloutTrajectory,
        RubricInfo,
        TaskAppConfig,
        TaskDescriptor,
        TaskInfo,
        chat_completion,
        normalize_inference_url,
    )
    from synth_ai.taskapp.tracing import correlation_id_of

    info = TaskInfo(
        task=TaskDescriptor(id=TASK_ID, name="GPU kit bench", version="1.0.0",
                            description="Answer a prompt; reward = share of lower-case ASCII letters."),
        environment=TASK_ID,
        dataset=DatasetInfo(id=TASK_ID, name="GPU kit prompts", version="1.0.0", splits=["train"],
                            default_split="train"),
        rubric=RubricInfo(outcome={"criteria": "share of lower-case ASCII letters in the answer"}),
        inference=InferenceInfo(), limits=LimitsInfo(max_turns=1), observation={"type": "text"})

    async def rollout(request: RolloutRequest, fastapi_request: Any = None) -> RolloutResponse:
        config = request.policy.config or {}
        url = normalize_inference_url(str(config["inference_url"]))
        prompt = gspo_prompt(int(request.env.seed or 0))
        payload = {"model": config.get("model"), "messages": [{"role": "user", "content": prompt}],
                   "temperature": config.get("temperature", 1.0), "max_tokens": config.get("max_tokens", 256)}
        completion = await chat_completion(url, payload, timeout=float(config.get("timeout_s") or 300))
        answer = (completion["choices"][0].get("message") or {}).get("content") or ""
        reward = gspo_reward(answer)
        step = RolloutStep(obs={"prompt": prompt}, tool_calls=[], reward=reward, done=True, truncated=False,
                           info={"meta": {"inference_url": url}})
        return RolloutResponse(
            run_id=request.run_id,
            trajectories=[RolloutTrajectory(env_id=TASK_ID, policy_id=request.policy.policy_name or "policy",
                                            steps=[step], final={"reward": reward}, length=1, inference_url=url)],
            metrics=RolloutMetrics(episode_returns=[reward], mean_return=reward, num_steps=1, num_episodes=1),
            ops_executed=len(request.ops), trace_correlation_id=correlation_id_of(url),
            pipeline_metadata={"inference_url": url})

    return TaskAppConfig(app_id=APP_ID, name="GPU kit bench", description="GSPO bench task of the GPU kit",
                         base_task_info=info, describe_taskset=lambda: {"id": TASK_ID, "splits": ["train"]},
                         provide_task_instances=lambda seeds: [info for _ in seeds], rollout=rollout)
