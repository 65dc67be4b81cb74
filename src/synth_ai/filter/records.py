"""Turning one session's stored messages into SFT records: one record per user turn and the assistant's reply.

Stored message content comes in several shapes, all handled here: the JSON of a chat message
(`{"role", "content", "tool_calls"?}`, what our task apps and `eval` store), synth-ai 0.2.17's
`SessionMessageContent` (`{"text"}` / `{"json_payload": "<json>"}`), a `{"payload": {"content"}}` wrapper, or
plain text. Multimodal content (a list of `text` / `image_url` parts) is kept as a list, so Qwen3-VL SFT gets
the images.

The pairing follows synth-ai 0.2.17: each `user` (or `policy_user_prompt`) message takes the next `assistant`
message as its reply, unless a `policy_system_prompt` comes first; a user turn with no text is skipped; a turn
with no reply gets `"[no response recorded]"`. A session with no messages falls back to `metadata.prompt` and
`metadata.completion`. One deliberate difference: an assistant reply made of tool calls keeps them
(`tool_calls`), where 0.2.17 wrote "[no response recorded]".
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from synth_ai.tracing.reader import MessageRow, SessionRow

USER_TYPES = frozenset({"user", "policy_user_prompt"})
REPLY_TYPES = frozenset({"assistant", "policy_system_prompt"})  # the first of these ends the search for a reply
NO_RESPONSE = "[no response recorded]"


def decode(raw: Any) -> Any:
    """A stored content cell as the value it holds: JSON objects and lists decoded, anything else as stored."""
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8", errors="replace")
    if isinstance(raw, str) and raw[:1] in ("{", "[", '"'):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def unwrap(value: Any) -> Any:
    """The message body inside the wrappers: a chat message's `content`, a 0.2.17 `json_payload`."""
    for _ in range(4):  # wrappers nest at most a couple of levels; never loop on a strange document
        if not isinstance(value, dict):
            return value
        if "content" in value:
            value = value["content"]
        elif isinstance(value.get("json_payload"), str):
            value = decode(value["json_payload"])
        else:
            return value
    return value


def text_of(value: Any) -> str:
    """The text of a message body (text parts of a list joined with spaces, as 0.2.17 does)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        payload = value.get("payload")
        if isinstance(payload, dict) and "content" in payload:
            return text_of(payload["content"])
        for key in ("text", "content", "content_text"):
            if isinstance(value.get(key), str):
                return value[key]
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return " ".join(str(p.get("text", "")) for p in value if isinstance(p, dict) and p.get("type") == "text")
    return str(value)


def _user_content(raw: Any) -> str | list[Any] | None:
    body = unwrap(decode(raw))
    if isinstance(body, list):
        return body or None
    return text_of(body) or None


def _as_tool_call(item: Any) -> dict[str, Any] | None:
    """An OpenAI-style tool call from one stored call: already in that form, or `{tool_name|name, arguments|args}`
    (what 0.2.17's crafter app stores as an assistant message's text)."""
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict):
        return item
    name = item.get("tool_name") or item.get("name")
    if not isinstance(name, str) or not name or item.get("type") in ("text", "image_url", "image"):
        return None
    arguments = item.get("arguments", item.get("args", {}))
    call = {"type": "function", "function": {"name": name, "arguments": arguments if isinstance(arguments, str)
                                             else json.dumps(arguments, ensure_ascii=False)}}
    return {"id": item["id"], **call} if isinstance(item.get("id"), str) else call


def _assistant_message(raw: Any) -> dict[str, Any]:
    message = decode(raw)
    body = unwrap(message)
    content: Any = body if isinstance(body, list) else text_of(body)
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if isinstance(body, list) and body:  # a list of tool calls stored as the content: tool_calls, not parts
        converted = [_as_tool_call(item) for item in body]
        if all(c is not None for c in converted):
            calls, content = converted, ""
    if isinstance(calls, list) and calls:
        return {"role": "assistant", "content": content or "", "tool_calls": calls}
    return {"role": "assistant", "content": content or NO_RESPONSE}


def pairs(rows: Sequence[MessageRow]) -> Iterator[list[dict[str, Any]]]:
    """The (user, assistant) message pairs of one session, in order."""
    next_reply: list[MessageRow | None] = [None] * len(rows)  # the first reply-type row after each position
    following: MessageRow | None = None
    for index in range(len(rows) - 1, -1, -1):
        next_reply[index] = following
        if rows[index].message_type in REPLY_TYPES:
            following = rows[index]
    for index, row in enumerate(rows):
        if row.message_type not in USER_TYPES:
            continue
        user = _user_content(row.content)
        if user is None:
            continue
        reply = next_reply[index]
        if reply is not None and reply.message_type == "assistant":
            assistant = _assistant_message(reply.content)
        else:
            assistant = {"role": "assistant", "content": NO_RESPONSE}
        yield [{"role": "user", "content": user}, assistant]


def _cell(value: Any) -> Any:
    """A stored cell as JSON can hold it: SQLite BLOBs (another writer's ids or rewards) become text."""
    return value.decode("utf-8", errors="replace") if isinstance(value, (bytes, bytearray)) else value


def record_metadata(session: SessionRow, metadata: Mapping[str, Any], created_at_iso: str | None) -> dict[str, Any]:
    return {
        "session_id": _cell(session.session_id),
        "env_name": metadata.get("env_name"),
        "policy_name": metadata.get("policy_name"),
        "seed": metadata.get("seed"),
        "total_reward": _cell(session.total_reward),
        "achievements_count": _cell(session.achievements_count),
        "model": metadata.get("model"),
        "created_at": created_at_iso if created_at_iso is not None else _cell(session.created_at),
    }


def session_records(session: SessionRow, metadata: Mapping[str, Any], rows: Sequence[MessageRow],
                    created_at_iso: str | None) -> Iterator[dict[str, Any]]:
    """Every SFT record one session yields (none when it has no usable turn)."""
    if rows:
        messages_list: Iterator[list[dict[str, Any]]] = pairs(rows)
    else:
        prompt, completion = metadata.get("prompt"), metadata.get("completion")
        messages_list = iter([[{"role": "user", "content": str(prompt)},
                               {"role": "assistant", "content": str(completion)}]] if prompt and completion else [])
    for messages in messages_list:
        yield {"messages": messages, "metadata": record_metadata(session, metadata, created_at_iso)}
