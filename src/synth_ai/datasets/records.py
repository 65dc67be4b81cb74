"""One SFT record: the rules it must follow, and its normalised form.

`check_line(raw, options)` parses one JSONL line (bytes) and returns a `RecordResult`: the problems found (all
of them, not only the first), warnings, counters for the summary and, when asked, the normalised record:

    {"messages": [{"role": "user", "content": "..." | [{"type": "text", "text": ...},
                                                      {"type": "image_url", "image_url": {"url": ...}}]},
                  {"role": "assistant", "content": ..., "tool_calls": [{"id"?, "type": "function",
                                                          "function": {"name": ..., "arguments": {...}}}]}],
     "tools": [{"type": "function", "function": {"name", "description"?, "parameters"?}}],   # when present
     "tool_choice"?, "metadata"?, ...other keys unchanged}

Legacy record-level `images` / `image` / `image_url` fields become image parts at the start of the first user
message, and images beyond the model's `max_images_per_message` are trimmed from each message (`trim_images`, the
same function the trainer uses).

These are the full rules: every error and warning message comes from here. `fastpath.fast_record` is only an
accelerator that vouches for clean records and sends everything else here.
"""

from __future__ import annotations

import sys

# The rules' shared context and the tool rules live in their own modules; the short aliases keep the rule code
# below as it was.
from synth_ai.datasets.checking import RecordOptions, RecordResult
from synth_ai.datasets.checking import RuleContext as _Ctx
from synth_ai.datasets.checking import show_value as _show
from synth_ai.datasets.checking import type_name as _type
from synth_ai.datasets.image_parts import IMAGE_PART_TYPES, trim_images, trim_message_images
from synth_ai.datasets.image_parts import count_images as _count_images
from synth_ai.datasets.images import check_image_url
from synth_ai.datasets.tool_rules import check_tool_call as _check_tool_call
from synth_ai.datasets.tool_rules import check_tools as _check_tools
from synth_ai.lean_json import loads as _loads

TYPE_CHECKING = False  # `typing` is not loaded at run time (the `files validate` start-up: see record_types)
if TYPE_CHECKING:
    from typing import Any

ROLES = ("system", "user", "assistant", "tool")
ROLE_SET = frozenset(ROLES)
LEGACY_IMAGE_FIELDS = ("images", "image", "image_url")
_MESSAGE_STRING_FIELDS = ("name", "reasoning", "raw_content")

__all__ = [
    "IMAGE_PART_TYPES",
    "LEGACY_IMAGE_FIELDS",
    "ROLES",
    "ROLE_SET",
    "RecordOptions",
    "RecordResult",
    "check_line",
    "check_record",
    "trim_images",
    "trim_message_images",
]


def check_line(raw: bytes | memoryview, options: RecordOptions) -> RecordResult:
    """Parse one non-blank JSONL line and apply every rule (the full path: all errors and warnings)."""
    try:
        obj = _loads(raw)
    except UnicodeDecodeError as exc:
        return RecordResult(errors=[f"not valid UTF-8 text ({exc.reason} at byte {exc.start})"])
    except RecursionError:
        return RecordResult(errors=["invalid JSON (arrays or objects nested too deeply to decode)"])
    except ValueError as exc:  # json's JSONDecodeError, or int() refusing a number's length
        if hasattr(exc, "colno"):
            return RecordResult(errors=[f"invalid JSON ({exc.msg} at column {exc.colno})"])
        if "digits" not in str(exc):
            return RecordResult(errors=[f"invalid JSON ({exc})"])
        return RecordResult(errors=[f"a number has more than {sys.get_int_max_str_digits():,} digits, more than "
                                    "Python decodes (write it as a string)"])
    return check_record(obj, options)


def check_record(obj: Any, options: RecordOptions) -> RecordResult:
    """Apply every rule to one decoded record (what `check_line` does after parsing; `obj` is not changed)."""
    ctx = _Ctx(options)
    record = _check_record(obj, ctx)
    res = ctx.res
    if options.normalize and not res.errors:
        res.record = record
    return res


def _check_record(obj: Any, ctx: _Ctx) -> dict[str, Any] | None:
    res = ctx.res
    if not isinstance(obj, dict):
        ctx.error(f"record is not an object (found {_type(obj)}); each line must be one JSON object")
        return None
    raw_messages = obj.get("messages")
    if raw_messages is None:
        ctx.error("missing messages[] list")
        return None
    if not isinstance(raw_messages, list):
        ctx.error(f"messages must be a list (found {_type(raw_messages)})")
        return None
    count = len(raw_messages)
    if count < ctx.opts.min_messages:
        ctx.error(f"missing messages[] with at least {ctx.opts.min_messages} turns (found {count})")
    messages = [_check_message(msg, i, ctx) for i, msg in enumerate(raw_messages)]
    res.messages = count

    out: dict[str, Any] | None = dict(obj) if ctx.normalize else None

    if "tools" in obj and obj["tools"] is not None:
        tools = _check_tools(obj["tools"], ctx)
        if out is not None:
            out["tools"] = tools
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        ctx.error(f"metadata must be an object if present (found {_type(metadata)})")

    legacy = _legacy_images(obj, ctx)
    if legacy:
        first_user = next((m for m in messages if m is not None and m.get("role") == "user"), None)
        if first_user is None:
            ctx.error(f"record-level {legacy[0][0]} field needs a user message to attach the images to")
        else:
            parts = [part for _, part in legacy]
            content = first_user.get("content")
            if content is None or content == "":
                first_user["content"] = parts
            elif isinstance(content, str):
                first_user["content"] = [*parts, {"type": "text", "text": content}]
            else:
                first_user["content"] = [*parts, *content]
            res.images += len(parts)
    if out is not None:
        for name in LEGACY_IMAGE_FIELDS:
            out.pop(name, None)

    if not res.errors and not any(m.get("role") == "assistant" for m in messages if m is not None):
        res.warnings.append("no assistant message: the record has nothing to learn from")

    if res.images:
        opts = ctx.opts
        if opts.vision is False:
            ctx.error(f"record has {res.images} image(s) but {opts.model_id} accepts text only")
        elif opts.max_images_per_message is not None:
            limit = opts.max_images_per_message
            for i, msg in enumerate(messages):
                if msg is None:
                    continue
                count_i = _count_images(msg.get("content"))
                if count_i > limit:
                    dropped = count_i - limit
                    res.images_dropped += dropped
                    res.warnings.append(
                        f"message {i} has {count_i} images; {opts.model_id} takes at most {limit} per message, "
                        f"so the first {limit} {'is' if limit == 1 else 'are'} kept and {dropped} dropped"
                    )
                    if ctx.normalize:
                        messages[i], _ = trim_message_images(msg, limit)
    if out is not None:
        out["messages"] = messages
    return out


def _check_message(msg: Any, i: int, ctx: _Ctx) -> dict[str, Any] | None:
    if not isinstance(msg, dict):
        ctx.error(f"message {i} is not an object (found {_type(msg)})")
        return None
    res = ctx.res
    role = msg.get("role")
    if not isinstance(role, str) or not role.strip():
        found = "missing" if role is None else f"found {_show(role)}"
        ctx.error(f"message {i} has invalid role ({found}; expected one of {', '.join(ROLES)})")
    elif role not in ROLE_SET:
        ctx.error(f"message {i} has invalid role {role!r} (expected one of {', '.join(ROLES)})")

    out: dict[str, Any] | None = dict(msg) if ctx.normalize else None
    content = msg.get("content")
    if content is None:
        pass
    elif isinstance(content, str):
        res.text_chars += len(content)
    elif isinstance(content, (list, dict)):
        parts = _check_parts(content if isinstance(content, list) else [content], i, ctx)
        if out is not None:
            out["content"] = parts
    else:
        ctx.error(f"message {i} has unsupported content type {_type(content)} (expected a string or a list "
                  "of content parts)")

    raw_calls = msg.get("tool_calls")
    if raw_calls is not None:
        if not isinstance(raw_calls, list):
            ctx.error(f"message {i} tool_calls must be a list (found {_type(raw_calls)})")
        else:
            calls = [_check_tool_call(call, i, j, ctx) for j, call in enumerate(raw_calls)]
            res.tool_calls += len(raw_calls)
            if out is not None:
                out["tool_calls"] = calls
    call_id = msg.get("tool_call_id")
    if out is not None and call_id is not None and not isinstance(call_id, str):
        out["tool_call_id"] = str(call_id)
    for name in _MESSAGE_STRING_FIELDS:
        value = msg.get(name)
        if value is not None and not isinstance(value, str):
            ctx.error(f"message {i} {name} must be a string if present (found {_type(value)})")
        elif name == "reasoning" and value:
            res.text_chars += len(value)
    # Without normalisation the caller only needs role and content to count images and assistants.
    return out if out is not None else {"role": role, "content": content if not isinstance(content, dict)
                                        else [content]}


def _check_parts(parts: list[Any], i: int, ctx: _Ctx) -> list[Any]:
    res = ctx.res
    out: list[Any] = []
    for k, part in enumerate(parts):
        where = f"message {i} content part {k}"
        if isinstance(part, str):  # a bare string inside a content list is text
            res.text_chars += len(part)
            out.append({"type": "text", "text": part})
            continue
        if not isinstance(part, dict):
            ctx.error(f"{where} is not an object (found {_type(part)})")
            continue
        ptype = part.get("type")
        if ptype is None:
            ptype = "text" if "text" in part else "image_url" if ("image_url" in part or "image" in part) else None
        if ptype == "text":
            text = part.get("text")
            if not isinstance(text, str):
                ctx.error(f"{where}: a text part needs a string 'text' (found {_type(text)})")
                continue
            res.text_chars += len(text)
            out.append(part if part.get("type") == "text" else {**part, "type": "text"})
        elif ptype in IMAGE_PART_TYPES:
            image = part.get("image_url")
            if image is None and ptype == "image":
                image = part.get("image")
            url = image.get("url") if isinstance(image, dict) else image
            checked = _image(url, where, ctx)
            if checked is not None:
                res.images += 1
                if ctx.normalize:
                    body = dict(image) if isinstance(image, dict) else {}
                    body["url"] = checked
                    out.append({"type": "image_url", "image_url": body})
        elif ptype is None:
            ctx.error(f"{where} has no 'type' (expected text or image_url)")
        else:
            ctx.error(f"{where} has unsupported type {_show(ptype)} (expected text or image_url)")
    return out


def _image(url: Any, where: str, ctx: _Ctx) -> str | None:
    """Check one image reference; return the URL to keep, or None after recording an error."""
    result = check_image_url(url, max_bytes=ctx.opts.max_image_bytes)
    if result.error is not None:
        ctx.error(f"{where}: {result.error}")
        return None
    if result.warning is not None:
        ctx.res.warnings.append(f"{where}: {result.warning}")
    return url


def _legacy_images(obj: dict[str, Any], ctx: _Ctx) -> list[tuple[str, dict[str, Any]]]:
    """Record-level `images` (list), `image` and `image_url` fields as image parts."""
    found: list[tuple[str, dict[str, Any]]] = []
    for name in LEGACY_IMAGE_FIELDS:
        value = obj.get(name)
        if value is None:
            continue
        items = value if name == "images" and isinstance(value, list) else [value]
        if name == "images" and not isinstance(value, list):
            ctx.error(f"images must be a list of image URLs (found {_type(value)})")
            continue
        for k, item in enumerate(items):
            where = f"{name}[{k}]" if name == "images" else name
            if isinstance(item, dict):
                inner = item.get("image_url", item.get("url", item.get("image")))
                url = inner.get("url") if isinstance(inner, dict) else inner
            else:
                url = item
            checked = _image(url, where, ctx)
            if checked is not None:
                found.append((name, {"type": "image_url", "image_url": {"url": checked}}))
    return found
