"""`stream: true` on the embedded backend's chat completions, read by the real `openai` client."""

from __future__ import annotations

import json

import httpx
import pytest

from backend_support import TINY_TEXT, BackendProcess

openai = pytest.importorskip("openai", reason="the openai client is in the dev extra")

TOOL = {"type": "function", "function": {"name": "math_submit", "description": "Submit the answer.",
                                         "parameters": {"type": "object", "properties": {"answer": {"type": "string"}},
                                                        "required": ["answer"]}}}


@pytest.fixture
def backend(shared_backend: BackendProcess) -> BackendProcess:
    """The worker's shared backend: these tests only call its inference endpoint."""
    return shared_backend


def _client(backend: BackendProcess):
    return openai.OpenAI(base_url=f"{backend.url}/api/inference/v1", api_key=backend.key, max_retries=0)


@pytest.mark.parametrize("tools", [None, [TOOL]], ids=["text", "tools"])
def test_streamed_completion_adds_up_to_the_plain_one(backend: BackendProcess, tools) -> None:
    client = _client(backend)
    args = {"model": TINY_TEXT, "messages": [{"role": "user", "content": "Count: one two three"}],
            "max_tokens": 24, "temperature": 0, "seed": 7}
    if tools:
        args["tools"] = tools
    plain = client.chat.completions.create(**args)
    chunks = list(client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == plain.usage.total_tokens
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert content == (plain.choices[0].message.content or "")
    assert finishes == [plain.choices[0].finish_reason]
    calls: dict[int, dict] = {}
    for c in chunks:
        for delta in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            entry = calls.setdefault(delta.index, {"id": None, "name": None, "arguments": ""})
            entry["id"] = delta.id or entry["id"]
            entry["name"] = (delta.function.name if delta.function else None) or entry["name"]
            entry["arguments"] += (delta.function.arguments or "") if delta.function else ""
    expected = [{"id": t.id, "name": t.function.name, "arguments": t.function.arguments}
                for t in plain.choices[0].message.tool_calls or []]
    assert [calls[i] for i in sorted(calls)] == expected


def test_stream_ends_with_done_and_errors_keep_their_status(backend: BackendProcess) -> None:
    headers = {"Authorization": f"Bearer {backend.key}"}
    body = {"model": TINY_TEXT, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    with httpx.stream("POST", f"{backend.url}/api/inference/v1/chat/completions", json=body, headers=headers,
                      timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    docs = [json.loads(line[len("data: "):]) for line in lines[:-1]]
    assert docs[0]["choices"][0]["delta"]["role"] == "assistant"
    assert docs[-1]["choices"][0]["finish_reason"] in {"stop", "length"}
    missing = httpx.post(f"{backend.url}/api/inference/v1/chat/completions", headers=headers, timeout=60,
                         json={**body, "model": "synth-ai/no-such-model"})
    assert missing.status_code == 404
    bad = httpx.post(f"{backend.url}/api/inference/v1/chat/completions", headers=headers, timeout=60,
                     json={**body, "stream": "yes"})
    assert bad.status_code == 400 and "stream" in bad.text


def test_tool_call_chunks_reassemble_with_the_openai_stream_state() -> None:
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    from synth_ai.backend.inference.streaming import completion_chunks

    completion = {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": TINY_TEXT,
        "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None, "message": {
            "role": "assistant", "content": "Let me submit a long enough answer here.",
            "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "math_submit", "arguments": json.dumps({"answer": "\\frac{7}{6} and more"})}},
                {"id": "call_b", "type": "function", "function": {"name": "noop", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
    }
    state = ChatCompletionStreamState()
    for doc in completion_chunks(completion, include_usage=True):
        state.handle_chunk(ChatCompletionChunk.model_validate(doc))
    final = state.get_final_completion()
    message = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert message.content == completion["choices"][0]["message"]["content"]
    assert [(t.id, t.function.name, t.function.arguments) for t in message.tool_calls] == [
        ("call_a", "math_submit", json.dumps({"answer": "\\frac{7}{6} and more"})), ("call_b", "noop", "{}")]
    assert final.usage.total_tokens == 8
