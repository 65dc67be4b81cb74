"""A session-trace JSON document (what a task app returns in a rollout's `trace.session_trace`, the shape
synth-ai 0.2.17's `SessionTrace.to_dict()` produces) turned back into a `SessionRecorder`, ready for `TraceStore`.

Times, step ids and contents are kept as sent. Events are typed as the reference types them (`event_type` when
present; else `actions` → runtime, `reward`/`terminated`/`truncated` → environment, `model_name`/`provider`/
`call_records` → cais). Messages keep their content (text, or the JSON payload: multimodal lists survive);
message types outside the schema's list become `system`, `action` becomes `assistant`, as the reference stores them.
An environment event with a numeric reward gets a `sparse` event reward.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from synth_ai.tracing.session import (
    MESSAGE_TYPES,
    Event,
    EventRef,
    Message,
    SessionRecorder,
    Timestep,
    now_iso,
)

_EVENT_FIELDS = ("system_instance_id", "model_name", "provider", "input_tokens", "output_tokens", "total_tokens",
                 "cost_usd", "latency_ms", "span_id", "trace_id", "call_records", "reward", "terminated",
                 "truncated", "system_state_before", "system_state_after", "metadata", "event_metadata")


def session_trace_of(trace: Any) -> dict[str, Any] | None:
    """The session-trace dict inside a rollout's `trace` (its `session_trace`, or the trace itself when it is a
    full session), or None for a compact trace or none at all."""
    if not isinstance(trace, dict):
        return None
    inner = trace.get("session_trace")
    if isinstance(inner, dict):
        return inner
    if "session_id" in trace and ("event_history" in trace or "markov_blanket_message_history" in trace
                                  or "session_time_steps" in trace):
        return trace
    return None


def recorder_from_session_trace(doc: dict[str, Any], *, session_id: str | None = None) -> SessionRecorder:
    recorder = SessionRecorder(session_id or _text(doc.get("session_id")) or None,
                               metadata=doc.get("metadata") if isinstance(doc.get("metadata"), dict) else None)
    recorder.created_at = _stamp(doc.get("created_at")) or recorder.created_at
    steps = [s for s in doc.get("session_time_steps") or [] if isinstance(s, dict)]
    for index, step in enumerate(steps):
        started = _stamp(step.get("timestamp")) or now_iso()
        step_id = _text(step.get("step_id")) or f"step_{index}"
        if any(t.step_id == step_id for t in recorder.timesteps):
            step_id = f"{step_id}_{index}"
        turn = step.get("turn_number")
        recorder.timesteps.append(Timestep(
            step_id, index, turn if isinstance(turn, int) else index, started,
            completed_at=_stamp(step.get("completed_at")),
            metadata=step.get("step_metadata") if isinstance(step.get("step_metadata"), dict) else {}))
    placed_events = [(i, e) for i, s in enumerate(steps) for e in s.get("events") or [] if isinstance(e, dict)]
    placed_messages = [(i, m) for i, s in enumerate(steps)
                       for m in s.get("markov_blanket_messages") or [] if isinstance(m, dict)]
    if not placed_events:
        placed_events = [(None, e) for e in doc.get("event_history") or [] if isinstance(e, dict)]
    if not placed_messages:
        placed_messages = [(None, m) for m in doc.get("markov_blanket_message_history") or [] if isinstance(m, dict)]
    for step_index, event in placed_events:
        _add_event(recorder, step_index, event)
    for step_index, message in placed_messages:
        _add_message(recorder, step_index, message)
    return recorder


def _add_event(recorder: SessionRecorder, step_index: int | None, event: dict[str, Any]) -> None:
    kind = event_type_of(event)
    fields = {name: event.get(name) for name in _EVENT_FIELDS if event.get(name) is not None}
    if kind == "runtime" and "actions" in event:
        fields["metadata"] = {**(fields.get("metadata") or {}), "actions": event["actions"]}
    times = event.get("time_record") if isinstance(event.get("time_record"), dict) else {}
    event_time = _number(times.get("event_time")) or _number(event.get("event_time"))
    created = _stamp(event.get("created_at")) or now_iso()
    recorder.events.append(Event(kind, step_index, event_time if event_time is not None else 0.0, created, fields))
    reward = fields.get("reward")
    if kind == "environment" and isinstance(reward, (int, float)) and not isinstance(reward, bool):
        recorder.event_reward(EventRef(len(recorder.events) - 1), float(reward), reward_type="sparse",
                              source="environment")


def event_type_of(event: dict[str, Any]) -> str:
    declared = event.get("event_type")
    if declared in ("cais", "environment", "runtime"):
        return declared
    if "actions" in event:
        return "runtime"
    if any(k in event for k in ("reward", "terminated", "truncated")):
        return "environment"
    if any(k in event for k in ("model_name", "provider", "call_records")):
        return "cais"
    return "runtime"


def _add_message(recorder: SessionRecorder, step_index: int | None, message: dict[str, Any]) -> None:
    raw_type = _text(message.get("message_type")) or "system"
    kind = raw_type if raw_type in MESSAGE_TYPES else ("assistant" if raw_type == "action" else "system")
    content = message_content(message.get("content"))
    times = message.get("time_record") if isinstance(message.get("time_record"), dict) else {}
    event_time = _number(times.get("event_time"))
    metadata = message.get("metadata") if isinstance(message.get("metadata"), dict) else {}
    if kind != raw_type:
        metadata = {**metadata, "original_message_type": raw_type}
    stamp = _stamp(message.get("timestamp")) or (_stamp(event_time) if event_time else None) or now_iso()
    recorder.messages.append(Message(kind, "" if content is None else content, step_index,
                                     event_time if event_time is not None else 0.0, stamp, metadata or None))


def message_content(content: Any) -> Any:
    """The content of a session-trace message: `{"text"}` → the text, `{"json_payload"}` → the decoded JSON (a
    string, as the reference sends it, or already an object), anything else as it is."""
    if isinstance(content, dict) and ("text" in content or "json_payload" in content):
        payload = content.get("json_payload")
        if payload is None:
            return content.get("text")
        if isinstance(payload, str):
            try:
                return json.loads(payload)
            except ValueError:
                return payload
        return payload
    return content


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _stamp(value: Any) -> str | None:
    """An ISO timestamp from an ISO string or epoch seconds."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    number = _number(value)
    if number is not None:
        from datetime import UTC

        return datetime.fromtimestamp(number, UTC).isoformat()
    return None
