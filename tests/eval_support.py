"""Helpers for the eval tests: a scripted model that answers the bundled math problems right or wrong on purpose,
an eval TOML writer, and reading the trace DB an eval wrote."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from synth_ai.bundled_apps import APPS_DIR
from taskapp_support import completion, tool_call

MATH_DATA = APPS_DIR / "math" / "data"


def _boxed(text: str) -> str:
    start = text.rfind("\\boxed{")
    depth, i = 0, text.index("{", start)
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    raise ValueError(text)


def math_rows(split: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in (MATH_DATA / f"{split}.jsonl").read_text().splitlines() if line.strip()]


def answering_policy(right: set[int] | None = None, split: str = "test"):
    """A policy answering problem index i of `split` right when i is in `right` (all when None), else wrong."""
    answers = {row["problem"]: (i, _boxed(row["solution"])) for i, row in enumerate(math_rows(split))}

    def policy(body: dict[str, Any]) -> dict[str, Any]:
        user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        index, answer = answers.get(user, (-1, "none"))
        if right is not None and index not in right:
            answer = "definitely wrong"
        return completion(tool_calls=[tool_call("math_submit", {"answer": answer})])

    return policy


def write_config(path: Path, model_url: str, **eval_keys: Any) -> Path:
    table = {"app_id": "math-single-step", "model": "scripted-model", "seeds": "0-3", "split": "test",
             "concurrency": 2, **eval_keys}
    table.setdefault("policy_config", {"inference_url": model_url, "temperature": 0.0})
    path.write_text("\n".join(_toml_table("eval", table)) + "\n")
    return path


def _toml_table(name: str, table: dict[str, Any]) -> list[str]:
    lines = [f"[{name}]"] + [f"{k} = {json.dumps(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for key, sub in table.items():
        if isinstance(sub, dict):
            lines += ["", *_toml_table(f"{name}.{key}", sub)]
    return lines


def sessions(db: Path) -> list[dict[str, Any]]:
    """Every stored session: id, metadata, outcome rows, message types, event types."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT session_id, created_at, metadata FROM session_traces ORDER BY created_at").fetchall()
        found = []
        for session_id, created_at, metadata in rows:
            found.append({
                "session_id": session_id, "created_at": created_at, "metadata": json.loads(metadata),
                "outcomes": conn.execute("SELECT total_reward, achievements_count FROM outcome_rewards "
                                         "WHERE session_id = ?", (session_id,)).fetchall(),
                "messages": [r[0] for r in conn.execute("SELECT message_type FROM messages WHERE session_id = ? "
                                                        "ORDER BY timestamp ASC, id ASC", (session_id,))],
                "contents": [r[0] for r in conn.execute("SELECT content FROM messages WHERE session_id = ? "
                                                        "ORDER BY timestamp ASC, id ASC", (session_id,))],
                "events": sorted(r[0] for r in conn.execute("SELECT event_type FROM events WHERE session_id = ?",
                                                            (session_id,))),
            })
    return found


def by_seed(db: Path) -> dict[int, dict[str, Any]]:
    return {s["metadata"]["eval_seed"]: s for s in sessions(db)}


JUDGE_FILE = '''
def judge(payload, scale=1.0):
    """Half the outcome, scaled: perfectly correlated with the official score."""
    return payload["metrics"]["outcome_score"] * 0.5 * scale


def picky(payload):
    if payload["seed"] == 1:
        raise RuntimeError("no opinion on seed 1")
    return {"score": 1.0 if payload["completion"] and "wrong" not in payload["completion"] else 0.2}
'''
