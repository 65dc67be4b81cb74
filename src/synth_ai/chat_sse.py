"""A finished chat completion replayed as Server-Sent Events, the way the OpenAI client reassembles a stream.

Per choice: a first delta with the role, the content in pieces, each tool call as a delta with its index, id, type
and name followed by its arguments, and a last empty delta carrying the `finish_reason`. With `include_usage` a
final chunk with empty `choices` carries the usage. The stream ends with `data: [DONE]`. Used by the backend's
OpenAI-compatible endpoint and by the relay a served verifiers environment calls (both generate a whole completion
first: tool calls are only known once the text is complete).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

CONTENT_PIECE_CHARS = 16  # content is cut into pieces of this many characters (a client sees it arrive in parts)


def _sse(doc: dict[str, Any] | str) -> str:
    data = doc if isinstance(doc, str) else json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    return f"data: {data}\n\n"


def _pieces(text: str, size: int = CONTENT_PIECE_CHARS) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def completion_chunks(completion: dict[str, Any], *, include_usage: bool = False) -> Iterator[dict[str, Any]]:
    """The `chat.completion.chunk` documents that add up to `completion`."""
    head = {"id": completion.get("id"), "object": "chat.completion.chunk", "created": completion.get("created"),
            "model": completion.get("model")}

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**head, "choices": [choice]}

    for choice in completion.get("choices") or []:
        index = int(choice.get("index", 0))
        message = choice.get("message") or {}
        yield chunk(index, {"role": message.get("role") or "assistant", "content": ""})
        if message.get("reasoning_content"):
            for piece in _pieces(str(message["reasoning_content"])):
                yield chunk(index, {"reasoning_content": piece})
        content = message.get("content")
        if isinstance(content, str) and content:
            for piece in _pieces(content):
                yield chunk(index, {"content": piece})
        for position, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") or {}
            yield chunk(index, {"tool_calls": [{
                "index": position, "id": call.get("id"), "type": call.get("type") or "function",
                "function": {"name": function.get("name"), "arguments": ""},
            }]})
            arguments = function.get("arguments")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments if arguments is not None else {})
            for piece in _pieces(arguments):
                yield chunk(index, {"tool_calls": [{"index": position, "function": {"arguments": piece}}]})
        yield chunk(index, {}, choice.get("finish_reason") or "stop")
    if include_usage:
        yield {**head, "choices": [], "usage": completion.get("usage")}


def sse_events(completion: dict[str, Any], *, include_usage: bool = False) -> Iterator[str]:
    """The SSE lines of a streamed completion, `data: [DONE]` last."""
    for doc in completion_chunks(completion, include_usage=include_usage):
        yield _sse(doc)
    yield _sse("[DONE]")
