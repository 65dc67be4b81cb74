"""From a finished rollout to what `eval` reports and stores: the task facts of the response (task id, split,
prompt, completion, as synth-ai 0.2.17 reads them from the first step's observation and the final observation,
falling back to the trace's metadata and messages) and the traces v3 session written for the seed.

The session is the task app's own session trace when it returned one (`trace_format` full/structured); from a
compact trace or none, a session is built from the response itself (one environment event per step); a session
without messages gets the prompt and completion as a user and an assistant message. Its metadata carries what the reference stores (`eval_seed`, `prompt_index`,
`task_id`, `task_split`, `task_rubric_id`, `official_score`, `judge_scores`, `model`, `prompt`, `completion`),
plus what the runner adds (`reward_components` and `reward_weights` for an app that reports its reward functions),
and the outcome row holds the official score, so `filter` can select on it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from synth_ai.tracing.importer import message_content, recorder_from_session_trace, session_trace_of
from synth_ai.tracing.session import SessionRecorder


@dataclass
class TaskFacts:
    task_id: str | None = None
    task_split: str | None = None
    task_rubric_id: str | None = None
    prompt_index: int | None = None
    prompt: str | None = None
    completion: str | None = None


def _first(*values: Any) -> Any:
    return next((v for v in values if isinstance(v, str) and v), None)


def task_facts(response: dict[str, Any], split: str) -> TaskFacts:
    facts = TaskFacts()
    trajectories = response.get("trajectories") if isinstance(response.get("trajectories"), list) else []
    first = trajectories[0] if trajectories and isinstance(trajectories[0], dict) else {}
    steps = first.get("steps") if isinstance(first.get("steps"), list) else []
    obs = steps[0].get("obs") if steps and isinstance(steps[0], dict) and isinstance(steps[0].get("obs"), dict) \
        else {}
    final = first.get("final") if isinstance(first.get("final"), dict) else {}
    final_obs = final.get("observation") if isinstance(final.get("observation"), dict) else {}
    final_info = final.get("info") if isinstance(final.get("info"), dict) else {}
    trace = response.get("trace") if isinstance(response.get("trace"), dict) else {}
    session = session_trace_of(trace) or {}
    meta = session.get("metadata") if isinstance(session.get("metadata"), dict) else trace.get("metadata") or {}
    meta = meta if isinstance(meta, dict) else {}
    for name in ("task_id", "task_split", "task_rubric_id"):
        setattr(facts, name, _first(obs.get(name), final_obs.get(name), final_info.get(name), meta.get(name)))
    facts.task_id = facts.task_id or _first(first.get("env_id"))
    facts.task_split = facts.task_split or split
    index = obs.get("prompt_index", meta.get("prompt_index"))
    facts.prompt_index = index if isinstance(index, int) and not isinstance(index, bool) else None
    messages = session.get("markov_blanket_message_history") or []
    facts.prompt = _first(obs.get("prompt")) or _last_text(messages, "user")
    facts.completion = _first(final_obs.get("completion")) or _last_text(messages, "assistant")
    return facts


def _content_text(content: Any) -> str | None:
    content = message_content(content)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        text = "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        return text or None
    if isinstance(content, dict):
        if content.get("tool_calls") and not content.get("content"):
            return json.dumps(content["tool_calls"], ensure_ascii=False)
        return _content_text(content.get("content"))
    return None


def _last_text(messages: list[Any], message_type: str) -> str | None:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("message_type") == message_type:
            text = _content_text(message.get("content"))
            if text:
                return text
    return None


def session_for(response: dict[str, Any], *, seed: int, model: str, facts: TaskFacts, official: float | None,
                outcome: float | None, judge_scores: dict[str, float | None], extra: dict[str, Any]) -> SessionRecorder:
    from synth_ai.taskapp.tracing import fill_from_response

    session = session_trace_of(response.get("trace"))
    recorder = recorder_from_session_trace(session) if session is not None else SessionRecorder()
    if not recorder.messages:  # no trace, a compact one, or an app that records no messages
        if facts.prompt:
            recorder.message("user", {"role": "user", "content": facts.prompt})
        if facts.completion:
            recorder.message("assistant", {"role": "assistant", "content": facts.completion})
    fill_from_response(recorder, response)
    steps = sum(len(t.get("steps") or []) for t in response.get("trajectories") or [] if isinstance(t, dict))
    if official is not None:
        recorder.set_outcome(official, total_steps=steps, metadata={"official_score": official,
                                                                    "outcome_score": outcome, "source": "eval"})
    recorder.metadata.update({
        **extra, "eval_seed": seed, "prompt_index": facts.prompt_index, "task_id": facts.task_id,
        "task_split": facts.task_split, "task_rubric_id": facts.task_rubric_id, "official_score": official,
        "outcome_score": outcome, "judge_scores": judge_scores, "model": model, "prompt": facts.prompt,
        "completion": facts.completion,
    })
    return recorder
