"""Helpers for the filter tests: sessions written through our real tracing store, filter configs, JSONL reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from synth_ai.tracing import SessionRecorder, TraceStore


def add_session(store: TraceStore, session_id: str, *, turns: list[tuple[Any, Any]] | None = None,
                reward: float | None = 1.0, created_at: str | None = None, system: str | None = "Be brief.",
                **metadata: Any) -> SessionRecorder:
    """One session: a system prompt, then (user content, assistant content or chat message) per turn."""
    rec = SessionRecorder(session_id, metadata=metadata)
    if created_at is not None:
        rec.created_at = created_at
    for index, (user, assistant) in enumerate(turns if turns is not None else [(f"question {session_id}",
                                                                               f"answer {session_id}")]):
        rec.timestep(f"turn-{index}", turn_number=index)
        if system is not None:
            rec.message("system", {"role": "system", "content": system})
        rec.message("user", {"role": "user", "content": user})
        if assistant is not None:
            reply = assistant if isinstance(assistant, dict) else {"role": "assistant", "content": assistant}
            rec.message("assistant", reply)
    if reward is not None:
        rec.set_outcome(reward)
    store.write(rec)
    return rec


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def filter_config(path: Path, db: Path | str, output: Path | str, **keys: Any) -> Path:
    lines = ["[filter]", f"db = {toml_value(str(db))}", f"output = {toml_value(str(output))}"]
    lines += [f"{k} = {toml_value(v)}" for k, v in keys.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
