"""A finished verifiers episode as a task-app rollout response.

Each model call (a sampled assistant node of the trace's message graph) is one step: its observation is what the
environment added since the previous call (the prompt, tool results, user turns), its `tool_calls` what the model
asked for. The last step carries the episode's reward: the weighted sum of the reward functions' scores, as
verifiers computes it. Each function's score is a metric (`metrics.details.reward_components`), with its weight
and verifiers' own metrics beside it. An episode that failed (a reward function raised, the model call failed, a
deadline passed) is an error, never a zero reward.
"""

from __future__ import annotations

from typing import Any

from synth_ai.taskapp.contracts import RolloutMetrics, RolloutResponse, RolloutStep, RolloutTrajectory
from synth_ai.taskapp.errors import RolloutError
from synth_ai.taskapp.tracing import correlation_id_of


class EpisodeFailed(RolloutError):
    code = "verifiers_episode_failed"


def _message(node: Any) -> dict[str, Any]:
    message = node.message.model_dump(mode="json", exclude_none=True)
    if message.get("tool_calls"):  # verifiers' flat tool calls, in the OpenAI shape the traces use
        message["tool_calls"] = [_openai_call(call) for call in message["tool_calls"]]
    return message


def _openai_call(call: dict[str, Any]) -> dict[str, Any]:
    return {"id": call.get("id"), "type": "function",
            "function": {"name": call.get("name"), "arguments": call.get("arguments")}}


def _steps(trace: Any, inference_url: str) -> list[dict[str, Any]]:
    nodes = trace.nodes
    steps = []
    for index, node in enumerate(nodes):
        if not node.sampled:
            continue
        context = []  # the environment's messages since the model's previous turn, oldest first
        parent = node.parent
        while parent is not None and not nodes[parent].sampled:
            context.append(_message(nodes[parent]))
            parent = nodes[parent].parent
        reply = _message(node)
        steps.append({"obs": {"messages": context[::-1], "turn": len(steps)},
                      "tool_calls": reply.get("tool_calls") or [],
                      "info": {"meta": {"inference_url": inference_url}, "reply": reply, "node": index}})
    return steps


def failure(episode: Any) -> EpisodeFailed | None:
    """Why the episode is not a result (None when it is one)."""
    if episode.ok:
        return None
    errors = [*episode.errors, *(e for t in episode.traces for e in t.errors)]
    text = "; ".join(f"{e.type}: {e.message}" for e in errors[:3]) or "the episode did not complete"
    if episode.is_timeout or any(t.is_timeout for t in episode.traces):
        return EpisodeFailed(f"The verifiers episode ran past its deadline: {text}", status_code=504,
                             code="verifiers_episode_timeout")
    if any(e.type == "TaskError" for e in errors):
        return EpisodeFailed(f"A reward function of the environment raised: {text}", code="verifiers_reward_failed")
    if any(e.type == "ProviderError" for e in errors):
        return EpisodeFailed(f"The policy's model call failed: {text}", status_code=502,
                             code="verifiers_model_call_failed")
    return EpisodeFailed(f"The verifiers episode failed: {text}")


def rollout_response(episode: Any, *, run_id: str, inference_url: str, env_name: str, policy_id: str,
                     task_label: str, ops: int) -> RolloutResponse:
    trajectories, components, weights, extra_metrics = [], {}, {}, {}
    total = 0.0
    for trace in episode.traces:
        reward = trace.reward
        total += reward
        for name, value in trace.rewards.items():
            if value is not None:
                components[name] = value.score
                weights[name] = value.weight
        extra_metrics.update({k: v for k, v in trace.metrics.items() if isinstance(v, (int, float))})
        steps = _steps(trace, inference_url)
        if steps:
            steps[-1].update(reward=reward, done=True, truncated=trace.stop_condition not in (None, "agent_completed"))
        trajectories.append(RolloutTrajectory(
            env_id=f"{env_name}:{task_label}", policy_id=policy_id, steps=[RolloutStep(**s) for s in steps],
            final={"reward": reward, "stop_condition": trace.stop_condition}, length=len(steps),
            inference_url=inference_url))
    num_steps = sum(t.length for t in trajectories)
    cid = correlation_id_of(inference_url)
    return RolloutResponse(
        run_id=run_id, trajectories=trajectories,
        metrics=RolloutMetrics(episode_returns=[total], mean_return=total, num_steps=num_steps, num_episodes=1,
                               outcome_score=total,
                               details={"reward_components": components, "reward_weights": weights,
                                        "verifiers_metrics": extra_metrics, "task": task_label,
                                        "episode_id": episode.id}),
        ops_executed=ops, trace_correlation_id=cid,
        pipeline_metadata={"trace_correlation_id": cid, "inference_url": inference_url},
    )
