"""Recording rollouts: which database (from the environment `serve` sets up), one `SessionRecorder` per rollout,
and writing it when the rollout ends.

Environment (as synth-ai 0.2.17):
- `TASKAPP_TRACING_ENABLED` (1/true/t/yes/y/on) turns recording on.
- The database: `TURSO_LOCAL_DB_URL` (a `sqlite+aiosqlite:///…` URL) > `SQLD_DB_PATH` (a file, or an sqld directory
  → `<dir>/dbs/default/data`) > `TASKAPP_TRACE_DB_PATH` > `./traces/task_app_traces.db`.
- `TASKAPP_SFT_OUTPUT_DIR` / `SFT_OUTPUT_DIR`: also write one JSONL file per rollout with each LM call's dialogue.

Inside a rollout, `current_trace()` is the session being recorded (or None): apps add timesteps, messages and
events to it, and `synth_ai.taskapp.inference.chat_completion` records each LM call there by itself. When the
rollout ends, steps the app did not record become `environment` events with `sparse` event rewards, and the
session gets an outcome reward; the session is written in one transaction.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from synth_ai.taskapp.contracts import RolloutRequest
from synth_ai.tracing.session import SessionRecorder, scrub
from synth_ai.tracing.store import TraceStore, db_path_from_url

log = logging.getLogger("synth_ai.taskapp.tracing")

TRUTHY = {"1", "true", "t", "yes", "y", "on"}
DEFAULT_DB = Path("traces") / "task_app_traces.db"

_CURRENT: ContextVar[SessionRecorder | None] = ContextVar("synth_ai_taskapp_trace", default=None)


def current_trace() -> SessionRecorder | None:
    """The session being recorded for the rollout in progress, or None when nothing is recorded."""
    return _CURRENT.get()


@contextmanager
def use_trace(recorder: SessionRecorder | None) -> Iterator[SessionRecorder | None]:
    token = _CURRENT.set(recorder)
    try:
        yield recorder
    finally:
        _CURRENT.reset(token)


@dataclass(frozen=True)
class TracingSettings:
    enabled: bool = False
    db_path: Path | None = None
    sft_output_dir: Path | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TracingSettings:
        env = os.environ if environ is None else environ
        enabled = (env.get("TASKAPP_TRACING_ENABLED") or "").strip().lower() in TRUTHY
        sft = (env.get("TASKAPP_SFT_OUTPUT_DIR") or env.get("SFT_OUTPUT_DIR") or "").strip()
        if not enabled:
            return cls(False, None, None)
        return cls(True, resolve_db_path(env), Path(sft).expanduser().resolve() if sft else None)

    @classmethod
    def disabled(cls) -> TracingSettings:
        return cls(False, None, None)


def resolve_db_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    url = (env.get("TURSO_LOCAL_DB_URL") or "").strip()
    if url:
        return db_path_from_url(url).resolve()
    sqld = (env.get("SQLD_DB_PATH") or "").strip()
    if sqld:
        path = Path(sqld).expanduser()
        return (path / "dbs" / "default" / "data").resolve() if path.is_dir() else path.resolve()
    explicit = (env.get("TASKAPP_TRACE_DB_PATH") or "").strip()
    if explicit:
        return db_path_from_url(explicit).resolve()
    return DEFAULT_DB.resolve()


def tracing_environment(trace_dir: str | os.PathLike[str] | None,
                        trace_db: str | os.PathLike[str] | None) -> dict[str, str]:
    """The variables `serve --trace DIR --trace-db PATH` exports (DB defaults to `<DIR>/synth_ai.db`)."""
    if trace_dir is None and trace_db is None:
        return {}
    env = {"TASKAPP_TRACING_ENABLED": "1"}
    if trace_dir is not None:
        directory = Path(trace_dir).expanduser().resolve()
        env["TASKAPP_SFT_OUTPUT_DIR"] = str(directory)
    db = Path(trace_db).expanduser().resolve() if trace_db is not None else directory / "synth_ai.db"
    env["SQLD_DB_PATH"] = str(db)
    env["TURSO_LOCAL_DB_URL"] = f"sqlite+aiosqlite:///{db}"
    env["TASKAPP_TRACE_DB_PATH"] = str(db)
    return env


def correlation_id_of(url: str | None) -> str | None:
    """The `cid` query parameter of an inference URL (the trainer's trace correlation id)."""
    if not url or "cid=" not in url:
        return None
    from urllib.parse import parse_qs, urlsplit

    values = parse_qs(urlsplit(url).query).get("cid")
    return values[0] if values else None


class RolloutTracer:
    """Per app: decides whether a rollout is recorded, and writes what was recorded."""

    def __init__(self, settings: TracingSettings, *, app_id: str) -> None:
        self.settings = settings
        self.app_id = app_id
        self._store: TraceStore | None = None
        self._lock = threading.Lock()

    def _get_store(self) -> TraceStore | None:
        if not (self.settings.enabled and self.settings.db_path):
            return None
        with self._lock:
            if self._store is None:
                self._store = TraceStore(self.settings.db_path)
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def begin(self, request: RolloutRequest) -> SessionRecorder | None:
        if not (self.settings.enabled or request.record.return_trace):
            return None
        config = request.policy.config or {}
        inference_url = config.get("inference_url")
        metadata = {
            "app_id": self.app_id,
            "run_id": request.run_id,
            "mode": request.mode,
            "env_name": request.env.env_name,
            "seed": request.env.seed,
            "policy_name": request.policy.policy_name,
            "model": config.get("model"),
            "trace_correlation_id": correlation_id_of(inference_url),
            "training_session_id": request.training_session_id,
        }
        if isinstance(request.env.config, dict) and request.env.config.get("split"):
            metadata["task_split"] = request.env.config["split"]
        return SessionRecorder(metadata={k: v for k, v in metadata.items() if v is not None})

    async def finish(self, recorder: SessionRecorder, request: RolloutRequest,
                     response: dict[str, Any]) -> dict[str, Any] | None:
        fill_from_response(recorder, response)
        store = self._get_store()
        if store is not None or self.settings.sft_output_dir is not None:
            try:
                await asyncio.to_thread(self._persist, store, recorder, request)
            except Exception:  # recording must not fail the rollout the trainer is waiting for
                log.exception("could not record rollout %s", request.run_id)
        if not (request.record.return_trace or self.settings.enabled):
            return None
        trace = recorder.compact()
        if request.record.trace_format in ("full", "structured"):
            trace["session_trace"] = recorder.session_trace()
        return trace

    def _persist(self, store: TraceStore | None, recorder: SessionRecorder, request: RolloutRequest) -> None:
        if store is not None:
            store.write(recorder)
        if self.settings.sft_output_dir is not None:
            write_sft_records(self.settings.sft_output_dir, recorder, request.run_id)


def fill_from_response(recorder: SessionRecorder, response: dict[str, Any]) -> None:
    """Record what the app did not: an `environment` event (+ `sparse` reward) per step, and the outcome."""
    steps = [s for t in (response.get("trajectories") or []) for s in (t.get("steps") or [])]
    if recorder.count("environment") == 0:
        for index, step in enumerate(steps):
            reward = step.get("reward")
            event = recorder.environment_event(
                reward=reward, terminated=bool(step.get("done")), truncated=step.get("truncated"),
                system_state_after=step.get("obs"), timestep=index,
                metadata={"tool_calls": step.get("tool_calls") or []},
            )
            if reward is not None:
                recorder.event_reward(event, float(reward), reward_type="sparse", source="environment")
    if recorder.outcome is None:
        metrics = response.get("metrics") or {}
        rewards = [float(s["reward"]) for s in steps if isinstance(s.get("reward"), (int, float))]
        total = metrics.get("outcome_score")
        if not isinstance(total, (int, float)):
            total = sum(rewards)
        recorder.set_outcome(
            total, total_steps=len(steps),
            metadata={"mean_return": metrics.get("mean_return"), "episode_returns": metrics.get("episode_returns")},
        )
    recorder.metadata.setdefault("total_reward", recorder.outcome.total_reward if recorder.outcome else None)


def write_sft_records(directory: Path, recorder: SessionRecorder, run_id: str) -> Path | None:
    """One JSONL file per rollout: for every LM call, the dialogue sent and the assistant's answer."""
    records = []
    for turn, event in enumerate(e for e in recorder.events if e.event_type == "cais"):
        call = event.fields.get("call_records") or {}
        request = call.get("request") or {} if isinstance(call, dict) else {}
        message = call.get("response_message") or {} if isinstance(call, dict) else {}
        dialogue = request.get("messages") or []
        has_image = any(_has_image(m) for m in dialogue)
        records.append(scrub({
            "run_id": run_id, "turn": turn, "model": event.fields.get("model_name"),
            "provider": event.fields.get("provider"), "dialogue": dialogue,
            "dialogue_text": [_text_of(m.get("content")) for m in dialogue if isinstance(m, dict)],
            "assistant": {"content": message.get("content"), "content_text": _text_of(message.get("content")),
                          "tool_calls": message.get("tool_calls") or [], "has_image": False},
            "metadata": {"user_has_image": has_image, "assistant_has_image": False, "has_image": has_image},
            "timestamp": event.created_at,
        }))
    if not records:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d_%H-%M-%S")
    safe_run = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)[:80] or "run"
    path = directory / f"{safe_run}_{stamp}.jsonl"
    with path.open("a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, default=str) + "\n")
    return path


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)


def _has_image(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content)
