"""Turning generated Qwen3 text into an OpenAI chat message: reasoning, content, tool calls, stop sequences.

Qwen3 writes reasoning as `<think>...</think>` before the answer and tool calls as
`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` blocks. `parse_output` splits those out:
reasoning goes to `reasoning_content` (as vLLM's reasoning parser does), each well-formed tool-call block becomes an
OpenAI `tool_calls` entry (`arguments` as a JSON string), and what is left is `content` (None when the reply is
only tool calls, "" when it is empty).
A block whose JSON does not parse stays in `content` untouched, so nothing the model wrote is lost.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def apply_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """Cut `text` at the earliest stop sequence; returns (text, whether a stop sequence was found)."""
    cut = None
    for stop in stops:
        if not stop:
            continue
        index = text.find(stop)
        if index >= 0 and (cut is None or index < cut):
            cut = index
    return (text, False) if cut is None else (text[:cut], True)


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(reasoning, rest). Text without `</think>` and without `<think>` has no reasoning."""
    if "</think>" in text:
        head, _, rest = text.partition("</think>")
        reasoning = head.split("<think>", 1)[-1] if "<think>" in head else head
        return reasoning.strip("\n").strip() or None, rest.lstrip("\n")
    if "<think>" in text:  # reasoning cut off (max_tokens) before it closed
        before, _, reasoning = text.partition("<think>")
        return reasoning.strip() or None, before.strip()
    return None, text


def parse_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """(remaining text, OpenAI tool_calls) from `<tool_call>` blocks with valid JSON."""
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    last = 0
    for match in _TOOL_CALL.finditer(text):
        call = _tool_call(match.group(1))
        if call is None:
            continue
        kept.append(text[last:match.start()])
        last = match.end()
        calls.append(call)
    kept.append(text[last:])
    return "".join(kept).strip(), calls


def _tool_call(body: str) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return {"id": f"call_{secrets.token_hex(12)}", "type": "function",
            "function": {"name": data["name"], "arguments": arguments}}


def parse_output(text: str, *, tools_enabled: bool) -> dict[str, Any]:
    """The assistant message for generated `text` (stop sequences already applied)."""
    reasoning, rest = split_reasoning(text)
    calls: list[dict[str, Any]] = []
    if tools_enabled and "<tool_call>" in rest:
        rest, calls = parse_tool_calls(rest)
    content = rest.strip()
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message
