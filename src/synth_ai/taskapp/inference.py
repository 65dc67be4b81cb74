"""Calling the policy: an OpenAI-compatible chat-completions endpoint at `policy.config.inference_url`.

- `normalize_inference_url` turns a base URL into a chat-completions URL and keeps the query string (the trainer's
  `?cid=<trace id>` must reach the model server).
- `chat_completion` posts one request with finite timeouts and returns the parsed completion, or raises
  `InferenceError` (HTTP 502/504 from `/rollout`) that says which URL failed and how. When a rollout is being
  traced, the call and its new messages are recorded in the current session. A 429 (a busy model server's full
  queue) is retried after its `Retry-After`, up to `BUSY_RETRIES` times; a connection that breaks before an answer
  (a pooled keep-alive connection the server closed just as it was reused, a reset) is retried `BROKEN_RETRIES`
  times: a chat completion has no side effect, so sending it again is safe.
- `tool_calls_of` reads a completion's tool calls (OpenAI `tool_calls`, or Qwen-style `<tool_call>` blocks in the
  text when the server does not parse them), arguments decoded.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import weakref
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from synth_ai import loopback_http
from synth_ai.env.secrets import redact
from synth_ai.taskapp.errors import InferenceError
from synth_ai.taskapp.tracing import current_trace

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_CONNECT_TIMEOUT_S = 10.0
_ERROR_BODY_CHARS = 400
BUSY_RETRIES = 5  # 429 answers (a full batching queue) retried after their Retry-After
MAX_RETRY_AFTER_S = 10.0
BROKEN_RETRIES = 2


def normalize_inference_url(url: str) -> str:
    """`…/v1/chat/completions` and `…/chat/completions` stay; `…/v1` gains `/chat/completions`; `…/chat` gains
    `/completions`; anything else gains `/v1/chat/completions`. The query string is kept
    (`https://h?cid=x` → `https://h/v1/chat/completions?cid=x`)."""
    text = (url or "").strip()
    if not text:
        raise InferenceError("policy.config.inference_url is empty", status_code=400, code="missing_inference_url")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InferenceError(f"inference_url must be an http(s) URL, not {text!r}", status_code=400,
                             code="invalid_inference_url")
    path = parts.path.rstrip("/")
    if path.endswith("/chat/completions"):
        pass
    elif path.endswith("/v1"):
        path += "/chat/completions"
    elif path.endswith("/chat"):
        path += "/completions"
    else:
        path += "/v1/chat/completions"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def with_cid(url: str, cid: str) -> str:
    """`url` with its `cid` query parameter set to `cid`."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "cid"]
    query.append(("cid", cid))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))


def _default_api_key(url: str) -> str | None:
    """Vendor keys go only to their vendor's host, the Synth key only to a Synth inference endpoint (a path under
    `/api/inference/`: the embedded backend on this machine uses its own key); any other endpoint gets no key
    unless one is passed."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host.endswith("openai.com"):
        return os.environ.get("OPENAI_API_KEY") or None
    if host.endswith("groq.com"):
        return os.environ.get("GROQ_API_KEY") or None
    if "/api/inference/" in parts.path:
        if host in {"127.0.0.1", "localhost", "::1"}:
            from synth_ai.env.backend_keys import default_key

            return default_key() or os.environ.get("SYNTH_API_KEY") or None
        return os.environ.get("SYNTH_API_KEY") or None
    return None


_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def _shared_client() -> Any:
    """One pooled AsyncClient per event loop (connections are reused across rollouts)."""
    import httpx

    loop = asyncio.get_running_loop()
    client = _CLIENTS.get(loop)
    if client is None or client.is_closed:
        client = httpx.AsyncClient(limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))
        _CLIENTS[loop] = client
    return client


async def chat_completion(
    inference_url: str,
    payload: dict[str, Any],
    *,
    api_key: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    client: Any = None,
    record: bool = True,
) -> dict[str, Any]:
    """POST `payload` (model, messages, tools, …) to the normalised `inference_url`; return the completion JSON."""
    import httpx

    url = normalize_inference_url(inference_url)
    send_headers = {"Content-Type": "application/json"}
    key = api_key if api_key is not None else _default_api_key(url)
    if key:
        send_headers["Authorization"] = f"Bearer {key}"
    send_headers.update(headers or {})
    # a model server on this machine (the RL trainer's policy server, the embedded backend): stdlib connections,
    # a fraction of httpx's CPU per call (synth_ai.loopback_http); anything else, or an injected client: httpx
    local = client is None and loopback_http.is_loopback_http(url)
    http = client if client is not None or local else _shared_client()
    shown = _shown_url(url)
    started = time.perf_counter()
    try:
        busy = broken = 0
        while True:
            try:
                if local:
                    response = await loopback_http.post_json(url, json.dumps(payload).encode(), send_headers, timeout,
                                                             connect_timeout_s=min(connect_timeout, timeout))
                else:
                    response = await http.post(
                        url, json=payload, headers=send_headers,
                        timeout=httpx.Timeout(timeout, connect=min(connect_timeout, timeout)),
                    )
            except (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError,
                    loopback_http.LoopbackUnreachable):
                if broken == BROKEN_RETRIES:
                    raise
                broken += 1
                await asyncio.sleep(0.1 * broken)
                continue
            if response.status_code != 429 or busy == BUSY_RETRIES:
                break
            busy += 1
            # a busy server (its batching queue is full) says when to come back
            await asyncio.sleep(_retry_after(response.headers.get("retry-after")))
    except (httpx.TimeoutException, loopback_http.LoopbackTimeout) as exc:
        raise InferenceError(
            f"The model endpoint {shown} did not answer within {timeout:g}s ({type(exc).__name__}).",
            status_code=504, code="inference_timeout", inference_url=shown,
        ) from exc
    except (httpx.HTTPError, loopback_http.LoopbackUnreachable) as exc:
        raise InferenceError(
            f"Could not reach the model endpoint {shown}: {type(exc).__name__}: {redact(str(exc)) or 'no detail'}",
            code="inference_unreachable", inference_url=shown,
        ) from exc
    latency_ms = int((time.perf_counter() - started) * 1000)
    if response.status_code >= 400:
        body = redact(response.text[:_ERROR_BODY_CHARS])
        raise InferenceError(
            f"The model endpoint {shown} answered HTTP {response.status_code}: {body or '(empty body)'}",
            code="inference_http_error", inference_url=shown, upstream_status=response.status_code,
        )
    try:
        completion = response.json()
    except ValueError as exc:
        raise InferenceError(
            f"The model endpoint {shown} answered with non-JSON content: "
            f"{redact(response.text[:_ERROR_BODY_CHARS])!r}",
            code="inference_bad_response", inference_url=shown,
        ) from exc
    choices = completion.get("choices") if isinstance(completion, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) \
            or not isinstance(choices[0].get("message"), dict):
        raise InferenceError(
            f"The model endpoint {shown} answered JSON that is not a chat completion (no choices[0].message): "
            f"{redact(json.dumps(completion)[:_ERROR_BODY_CHARS])}",
            code="inference_bad_response", inference_url=shown,
        )
    if record:
        _record(url, payload, completion, latency_ms)
    return completion


def _retry_after(value: str | None) -> float:
    try:
        return min(max(float(value or 1), 0.05), MAX_RETRY_AFTER_S)
    except ValueError:
        return 1.0


def _shown_url(url: str) -> str:
    """The URL as shown in errors and traces: without user:password."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


_ROLE_TO_TYPE = {"system": "system", "user": "user", "assistant": "assistant", "tool": "tool_result",
                 "developer": "system"}


def _record(url: str, payload: dict[str, Any], completion: dict[str, Any], latency_ms: int) -> None:
    trace = current_trace()
    if trace is None:
        return
    messages = [m for m in payload.get("messages") or [] if isinstance(m, dict)]
    last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    for message in messages[last_assistant + 1:]:
        trace.message(_ROLE_TO_TYPE.get(str(message.get("role")), "user"), message)
    reply = completion["choices"][0]["message"]
    usage = completion.get("usage") or {}
    host = urlsplit(url).hostname or ""
    provider = "openai" if host.endswith("openai.com") else "groq" if host.endswith("groq.com") else "custom"
    trace.lm_call(
        model_name=completion.get("model") or payload.get("model"), provider=provider,
        input_tokens=usage.get("prompt_tokens"), output_tokens=usage.get("completion_tokens"),
        total_tokens=usage.get("total_tokens"), latency_ms=latency_ms,
        call_records={
            "inference_url": _shown_url(url),
            "request": {k: v for k, v in payload.items() if k != "api_key"},
            "response_message": reply,
            "finish_reason": completion["choices"][0].get("finish_reason"),
            "usage": usage,
        },
    )
    trace.message("assistant", {"role": "assistant", **{k: v for k, v in reply.items() if k != "role"}})


_TOOL_CALL_BLOCK = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def tool_calls_of(completion: dict[str, Any]) -> list[dict[str, Any]]:
    """`[{"id", "name", "arguments": dict}]` from the first choice. Arguments that are not valid JSON come back as
    `{"_raw": text}` so the app can decide (and report) rather than crash."""
    choices = completion.get("choices") if isinstance(completion.get("choices"), list) else []
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = first.get("message") if isinstance(first.get("message"), dict) else {}
    calls: list[dict[str, Any]] = []
    tool_calls = message.get("tool_calls") if isinstance(message.get("tool_calls"), list) else []
    for index, call in enumerate(tool_calls):
        if not isinstance(call, dict):  # a misbehaving model server: skip what is not a tool call
            continue
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        calls.append({"id": call.get("id") or f"call_{index}", "name": function.get("name"),
                      "arguments": _arguments(function.get("arguments"))})
    if calls:
        return calls
    content = message.get("content")
    if isinstance(content, str):
        for index, block in enumerate(_TOOL_CALL_BLOCK.findall(content)):
            try:
                data = json.loads(block)
            except ValueError:
                continue
            if isinstance(data, dict) and data.get("name"):
                calls.append({"id": f"call_{index}", "name": data["name"],
                              "arguments": _arguments(data.get("arguments", data.get("parameters")))})
    return calls


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return {"_raw": raw}
        return value if isinstance(value, dict) else {"_raw": raw}
    return {"_raw": str(raw)}
