"""A chat completion request, checked and made ready for the chat template.

`validate(body)` turns an OpenAI chat request into the engine's parameters (or raises `InvalidInputError` saying
which field is wrong and what it accepts); `prepare_messages(messages, loaded)` gives messages the template can
render (image parts become placeholders, tool-call arguments become objects) and the decoded images, in order.
"""

from __future__ import annotations

from typing import Any

from synth_ai.errors import InvalidInputError

MAX_N = 16
MAX_STOP = 4
MAX_REQUEST_PIXELS = 64 * 1024 * 1024  # decoded image pixels in one request, all images together
MAX_STOP_CHARS = 1024  # generate's stop-string matcher costs time in proportion to the string's length
DEFAULT_MAX_TOKENS = 256
MAX_TOKENS_CAP = 32768
ROLES = {"system", "user", "assistant", "tool"}


def validate(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        raise InvalidInputError("The request body must be a JSON object.")
    model = request.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidInputError("`model` is required (a model id from GET /v1/models).")
    if request.get("stream"):
        raise InvalidInputError("Streaming is not supported by this backend; send `stream: false`.")
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidInputError("`messages` must be a non-empty list of chat messages.")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidInputError(f"messages[{i}] must be an object.")
        if message.get("role") not in ROLES:
            raise InvalidInputError(f"messages[{i}].role must be one of system, user, assistant, tool "
                                    f"(found {message.get('role')!r}).")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise InvalidInputError(f"messages[{i}].content must be a string, a list of parts or null.")
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise InvalidInputError(f"messages[{i}].tool_calls must be a list.")

    def number(name: str, default: float, low: float, high: float) -> float:
        value = request.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low <= value <= high):
            raise InvalidInputError(f"`{name}` must be a number between {low} and {high} (found {value!r}).")
        return float(value)

    def integer(name: str, default: int | None, low: int, high: int) -> int | None:
        value = request.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not (low <= value <= high):
            raise InvalidInputError(f"`{name}` must be an integer between {low} and {high} (found {value!r}).")
        return value

    max_tokens = integer("max_completion_tokens", None, 1, MAX_TOKENS_CAP)
    if max_tokens is None:
        max_tokens = integer("max_tokens", DEFAULT_MAX_TOKENS, 1, MAX_TOKENS_CAP)
    stop = request.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOP:
        stops = list(stop)
    else:
        raise InvalidInputError(f"`stop` must be a string or a list of at most {MAX_STOP} strings.")
    stops = [s for s in stops if s]
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise InvalidInputError(f"Each `stop` string must be at most {MAX_STOP_CHARS} characters "
                                f"(found {max(len(s) for s in stops)}).")
    thinking = request.get("thinking_mode")
    if thinking is not None and thinking not in ("think", "no_think"):
        raise InvalidInputError(f"`thinking_mode` must be 'think' or 'no_think' (found {thinking!r}).")
    tools = request.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise InvalidInputError("`tools` must be a list of function tools.")
        tools = [_normalize_tool(t, i) for i, t in enumerate(tools)] or None
    tool_choice = request.get("tool_choice")
    if isinstance(tool_choice, dict):
        tool_choice = "required"
    seed = request.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise InvalidInputError(f"`seed` must be an integer (found {seed!r}).")
    return {
        "model": model.strip(), "messages": messages, "max_tokens": max_tokens,
        "temperature": number("temperature", 1.0, 0.0, 2.0), "top_p": number("top_p", 1.0, 0.0, 1.0) or 1.0,
        "top_k": integer("top_k", None, 0, 10**6), "n": integer("n", 1, 1, MAX_N), "stop": stops,
        "seed": seed, "thinking_mode": thinking, "thinking_budget": integer("thinking_budget", None, 0, 10**6),
        "tools": tools, "tool_choice": tool_choice or "auto",
    }


def _normalize_tool(tool: Any, index: int) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise InvalidInputError(f"tools[{index}] must be an object.")
    fn = tool.get("function") if tool.get("type", "function") == "function" and "function" in tool else tool
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise InvalidInputError(f"tools[{index}] needs function.name.")
    return {"type": "function", "function": fn}


def prepare_messages(messages: list[dict[str, Any]], loaded: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """Messages the template can render (image parts become placeholders) and the decoded images, in order."""
    import json

    from synth_ai.backend.ml.images import env_flag, image_url_of, load_image

    allow_remote = env_flag("SYNTH_INFERENCE_ALLOW_REMOTE_IMAGES")
    images: list[Any] = []
    pixels_left = MAX_REQUEST_PIXELS
    out = []
    for i, message in enumerate(messages):
        message = dict(message)
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if isinstance(part, str):
                    parts.append({"type": "text", "text": part})
                    continue
                url = image_url_of(part)
                if url is None:
                    if not isinstance(part, dict) or (part.get("type") not in (None, "text")) or \
                            not isinstance(part.get("text"), str):
                        raise InvalidInputError(f"messages[{i}].content[{j}] must be a text or image_url part.")
                    parts.append({"type": "text", "text": part["text"]})
                    continue
                if not loaded.vision:
                    raise InvalidInputError(f"messages[{i}] has an image, but {loaded.model_id} accepts text only.",
                                            hint="Use a Qwen3-VL model (e.g. synth-ai/tiny-qwen3-vl) for images.")
                image = load_image(url, allow_remote=allow_remote, where=f"messages[{i}].content[{j}]",
                                   max_pixels=pixels_left)
                pixels_left -= image.size[0] * image.size[1]
                images.append(image)
                parts.append({"type": "image"})
            message["content"] = parts if loaded.vision else "".join(p["text"] for p in parts)
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                fn = call.get("function", call) if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise InvalidInputError(f"messages[{i}].tool_calls entries need function.name.")
                arguments = fn.get("arguments", {})
                if isinstance(arguments, str):
                    try:
                        arguments = json.loads(arguments) if arguments.strip() else {}
                    except ValueError:
                        pass  # rendered verbatim
                calls.append({**call, "function": {"name": fn["name"], "arguments": arguments}})
            message["tool_calls"] = calls
        if message.get("reasoning") and not message.get("reasoning_content"):
            message["reasoning_content"] = message["reasoning"]
        out.append(message)
    return out, images
