"""`SessionRecorder`: one traced session (an episode, a rollout) built in memory, then written by `TraceStore`.

A session has timesteps; events (`cais` = an LM call, `environment` = a step's reward/termination, `runtime` =
actions taken) and messages (`user`, `assistant`, `system`, `tool_use`, `tool_result`) attach to the current
timestep; event rewards point at an event; one outcome reward sums the session up.

    rec = SessionRecorder(metadata={"task_id": "math:train:3", "model": "Qwen/Qwen3-0.6B"})
    rec.timestep("turn-0", turn_number=0)
    rec.message("user", {"role": "user", "content": "What is 2+2?"})
    lm = rec.lm_call(model_name="Qwen/Qwen3-0.6B", provider="openai-compatible", input_tokens=12, ...)
    env = rec.environment_event(reward=1.0, terminated=True)
    rec.event_reward(env, 1.0, reward_type="sparse", source="environment")
    rec.set_outcome(1.0, total_steps=1)

Secrets never reach a trace: values under secret-looking keys are masked and known secret values are scrubbed
from every stored string (see `synth_ai.env.secrets`).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from synth_ai.env.secrets import is_secret_name, mask_secret, redact, secret_values

MESSAGE_TYPES: tuple[str, ...] = ("user", "assistant", "system", "tool_use", "tool_result")
EVENT_TYPES: tuple[str, ...] = ("cais", "environment", "runtime")


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def scrub(value: Any, secrets: list[str] | None = None) -> Any:
    """A copy of `value` with secret-named keys masked and secret values removed from strings. The secrets are
    read from the environment once per call, not once per string (a trace holds thousands of strings)."""
    if secrets is None:
        secrets = secret_values()
    if isinstance(value, dict):
        return {
            str(k): (mask_secret(str(v)) if v and isinstance(v, str) and is_secret_name(str(k))
                     else scrub(v, secrets))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [scrub(v, secrets) for v in value]
    if isinstance(value, str):
        return redact(value, secrets)
    return value


def to_json(value: Any, secrets: list[str] | None = None) -> str | None:
    if value is None:
        return None
    return json.dumps(scrub(value, secrets), default=str, separators=(",", ":"))


@dataclass(frozen=True)
class EventRef:
    """A handle on a recorded event (its position in the session), for attaching event rewards."""

    index: int


@dataclass
class Timestep:
    step_id: str
    step_index: int
    turn_number: int | None
    started_at: str
    completed_at: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Event:
    event_type: str
    timestep_index: int | None
    event_time: float
    created_at: str
    fields: dict[str, Any]


@dataclass
class Message:
    message_type: str
    content: Any
    timestep_index: int | None
    event_time: float
    timestamp: str
    metadata: dict[str, Any] | None = None


@dataclass
class EventReward:
    event: EventRef
    reward_value: float
    reward_type: str | None
    key: str | None
    annotation: Any
    source: str | None
    turn_number: int | None
    created_at: str


@dataclass
class Outcome:
    total_reward: float
    achievements_count: int
    total_steps: int
    metadata: dict[str, Any] | None
    created_at: str


class SessionRecorder:
    def __init__(self, session_id: str | None = None, *, metadata: dict[str, Any] | None = None,
                 experiment_id: str | None = None) -> None:
        self.session_id = session_id or f"session_{uuid.uuid4().hex}"
        self.created_at = now_iso()
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.experiment_id = experiment_id
        self.timesteps: list[Timestep] = []
        self.events: list[Event] = []
        self.messages: list[Message] = []
        self.event_rewards: list[EventReward] = []
        self.outcome: Outcome | None = None

    # -- structure ---------------------------------------------------------------------------------------------

    def timestep(self, step_id: str | None = None, *, turn_number: int | None = None,
                 metadata: dict[str, Any] | None = None) -> str:
        """Start a new timestep (completing the previous one); later events and messages attach to it."""
        stamp = now_iso()
        if self.timesteps and self.timesteps[-1].completed_at is None:
            self.timesteps[-1].completed_at = stamp
        index = len(self.timesteps)
        step = Timestep(step_id or f"step_{index}", index, turn_number if turn_number is not None else index,
                        stamp, metadata=dict(metadata or {}))
        if any(t.step_id == step.step_id for t in self.timesteps):
            raise ValueError(f"timestep {step.step_id!r} already recorded in session {self.session_id}")
        self.timesteps.append(step)
        return step.step_id

    def _current(self) -> int:
        """The current timestep's index; the first event or message of a session opens `step_0` itself."""
        if not self.timesteps:
            self.timestep()
        return len(self.timesteps) - 1

    def _ensure_step(self, index: int) -> int:
        while len(self.timesteps) <= index:
            self.timestep()
        return index

    def _event(self, event_type: str, fields: dict[str, Any], timestep: int | None = None) -> EventRef:
        if event_type not in EVENT_TYPES:
            raise ValueError(f"event_type must be one of {EVENT_TYPES}, not {event_type!r}")
        step = self._current() if timestep is None else self._ensure_step(timestep)
        self.events.append(Event(event_type, step, time.time(), now_iso(), fields))
        return EventRef(len(self.events) - 1)

    # -- events ------------------------------------------------------------------------------------------------

    def lm_call(self, *, model_name: str | None, provider: str | None = None, input_tokens: int | None = None,
                output_tokens: int | None = None, total_tokens: int | None = None, latency_ms: int | None = None,
                cost_usd: int | None = None, call_records: Any = None, system_instance_id: str | None = None,
                metadata: dict[str, Any] | None = None) -> EventRef:
        """A language-model call (`cais` event). `call_records` holds the request/response (never headers)."""
        if total_tokens is None and input_tokens is not None and output_tokens is not None:
            total_tokens = input_tokens + output_tokens
        return self._event("cais", {
            "model_name": model_name, "provider": provider, "input_tokens": input_tokens,
            "output_tokens": output_tokens, "total_tokens": total_tokens, "latency_ms": latency_ms,
            "cost_usd": cost_usd, "call_records": call_records, "system_instance_id": system_instance_id,
            "metadata": metadata,
        })

    def environment_event(self, *, reward: float | None = None, terminated: bool | None = None,
                          truncated: bool | None = None, system_state_before: Any = None,
                          system_state_after: Any = None, system_instance_id: str | None = None,
                          metadata: dict[str, Any] | None = None, timestep: int | None = None) -> EventRef:
        """An environment step's outcome. `timestep` (an index) attaches it to an earlier timestep."""
        return self._event("environment", {
            "reward": reward, "terminated": terminated, "truncated": truncated,
            "system_state_before": system_state_before, "system_state_after": system_state_after,
            "system_instance_id": system_instance_id, "metadata": metadata,
        }, timestep)

    def runtime_event(self, *, actions: Any, system_instance_id: str | None = None,
                      metadata: dict[str, Any] | None = None) -> EventRef:
        return self._event("runtime", {
            "system_instance_id": system_instance_id, "metadata": {**(metadata or {}), "actions": actions},
        })

    def message(self, message_type: str, content: Any, *, metadata: dict[str, Any] | None = None) -> None:
        if message_type not in MESSAGE_TYPES:
            raise ValueError(f"message_type must be one of {MESSAGE_TYPES}, not {message_type!r}")
        self.messages.append(Message(message_type, content, self._current(), time.time(), now_iso(), metadata))

    def event_reward(self, event: EventRef, reward_value: float, *, reward_type: str | None = None,
                     key: str | None = None, annotation: Any = None, source: str | None = None,
                     turn_number: int | None = None) -> None:
        if not 0 <= event.index < len(self.events):
            raise ValueError(f"no event {event.index} in session {self.session_id}")
        if turn_number is None:
            step = self.events[event.index].timestep_index
            turn_number = self.timesteps[step].turn_number if step is not None else None
        self.event_rewards.append(EventReward(event, float(reward_value), reward_type, key, annotation, source,
                                              turn_number, now_iso()))

    def set_outcome(self, total_reward: float, *, achievements_count: int = 0, total_steps: int | None = None,
                    metadata: dict[str, Any] | None = None) -> None:
        steps = len(self.timesteps) if total_steps is None else total_steps
        self.outcome = Outcome(total_reward, achievements_count, steps, metadata, now_iso())

    def finish(self) -> None:
        if self.timesteps and self.timesteps[-1].completed_at is None:
            self.timesteps[-1].completed_at = now_iso()

    def count(self, event_type: str | None = None) -> int:
        return sum(1 for e in self.events if event_type is None or e.event_type == event_type)

    # -- views -------------------------------------------------------------------------------------------------

    def compact(self) -> dict[str, Any]:
        """The small trace a rollout response carries by default (as the reference's apps return)."""
        return scrub({
            "session_id": self.session_id,
            "created_at": self.created_at,
            "metadata": self.metadata,
            "events_count": len(self.events),
            "messages_count": len(self.messages),
            "lm_calls": self.count("cais"),
            "decision_rewards": [r.reward_value for r in self.event_rewards],
        })

    def session_trace(self) -> dict[str, Any]:
        """The full session-trace JSON (`session_time_steps`, `event_history`, `markov_blanket_message_history`)."""
        events = [self._event_doc(e) for e in self.events]
        messages = [self._message_doc(m) for m in self.messages]
        steps = []
        for t in self.timesteps:
            steps.append({
                "step_id": t.step_id, "step_index": t.step_index, "timestamp": t.started_at,
                "turn_number": t.turn_number, "step_metadata": t.metadata, "completed_at": t.completed_at,
                "events": [d for d, e in zip(events, self.events, strict=True) if e.timestep_index == t.step_index],
                "markov_blanket_messages": [d for d, m in zip(messages, self.messages, strict=True)
                                            if m.timestep_index == t.step_index],
            })
        return scrub({
            "session_id": self.session_id, "created_at": self.created_at, "metadata": self.metadata,
            "session_time_steps": steps, "event_history": events, "markov_blanket_message_history": messages,
        })

    @staticmethod
    def _event_doc(event: Event) -> dict[str, Any]:
        doc = {k: v for k, v in event.fields.items() if v is not None}
        if isinstance(doc.get("call_records"), dict):  # the reference reads a list of call records
            doc["call_records"] = [doc["call_records"]]
        doc["event_type"] = event.event_type
        doc["time_record"] = {"event_time": event.event_time, "message_time": None}
        return doc

    @staticmethod
    def _message_doc(message: Message) -> dict[str, Any]:
        content = message.content
        # As the reference's SessionMessageContent: `text`, or `json_payload` holding the JSON as a string.
        body = {"text": content} if isinstance(content, str) else {
            "json_payload": json.dumps(content, default=str, ensure_ascii=False, separators=(",", ":"))}
        return {
            "content": body, "message_type": message.message_type,
            "time_record": {"event_time": message.event_time, "message_time": None},
            "metadata": message.metadata or {},
        }
