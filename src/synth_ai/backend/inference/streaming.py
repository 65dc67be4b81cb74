"""`stream: true` for the OpenAI-compatible endpoint: a finished chat completion replayed as Server-Sent Events.

The engine generates a whole completion (tool calls are only known once the text is complete, as with any server
that parses Qwen's `<tool_call>` blocks), then it goes out as `chat.completion.chunk` events
(`synth_ai.chat_sse`). This module reads what the request asks for: `stream`, and `stream_options.include_usage`
(a final chunk with the usage).
"""

from __future__ import annotations

from typing import Any

from synth_ai.chat_sse import completion_chunks, sse_events

__all__ = ["completion_chunks", "sse_events", "stream_settings"]


def stream_settings(body: dict[str, Any]) -> tuple[bool, bool]:
    """(stream requested, usage chunk requested); raises ValueError for a malformed `stream_options`."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ValueError(f"`stream` must be true or false (found {stream!r}).")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ValueError("`stream_options` must be an object, e.g. {\"include_usage\": true}.")
    return bool(stream), bool((options or {}).get("include_usage"))
