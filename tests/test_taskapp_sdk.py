"""SDK pieces without servers: contracts, the registry, inference URL handling, tool-call parsing, vision messages."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest
from pydantic import ValidationError

from synth_ai.taskapp import (
    RolloutRequest,
    RolloutResponse,
    TaskAppConfig,
    TaskAppEntry,
    TaskInfo,
    VisionSettings,
    build_user_message,
    get_registered,
    image_to_png_bytes,
    normalize_inference_url,
    register_task_app,
    rl_response_problems,
    tool_calls_of,
    unregister_task_app,
    with_cid,
)
from synth_ai.taskapp.errors import InferenceError


@pytest.mark.parametrize("given, expected", [
    ("http://h:8000/v1/chat/completions", "http://h:8000/v1/chat/completions"),
    ("http://h/chat/completions", "http://h/chat/completions"),
    ("http://h/v1", "http://h/v1/chat/completions"),
    ("http://h/v1/", "http://h/v1/chat/completions"),
    ("http://h/api/inference/chat", "http://h/api/inference/chat/completions"),
    ("https://h", "https://h/v1/chat/completions"),
    ("https://h?cid=x", "https://h/v1/chat/completions?cid=x"),
    ("http://h/v1?cid=trace_1&x=2", "http://h/v1/chat/completions?cid=trace_1&x=2"),
    ("http://h/api/inference/v1/chat/completions?cid=c", "http://h/api/inference/v1/chat/completions?cid=c"),
])
def test_normalize_inference_url(given, expected):
    assert normalize_inference_url(given) == expected


def test_bad_inference_urls_and_cid():
    for bad in ("", "ftp://h/v1", "not a url"):
        with pytest.raises(InferenceError):
            normalize_inference_url(bad)
    assert with_cid("http://h/v1/chat/completions?a=1&cid=old", "new") == "http://h/v1/chat/completions?a=1&cid=new"


def test_tool_calls_of_variants():
    openai_style = {"choices": [{"message": {"tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "math_submit", "arguments": "{\"answer\": \"4\"}"}},
        {"type": "function", "function": {"name": "other", "arguments": "not json"}},
    ]}}]}
    assert tool_calls_of(openai_style) == [
        {"id": "c1", "name": "math_submit", "arguments": {"answer": "4"}},
        {"id": "call_1", "name": "other", "arguments": {"_raw": "not json"}},
    ]
    qwen_style = {"choices": [{"message": {"content": "thinking...\n<tool_call>\n{\"name\": \"act\", "
                                                      "\"arguments\": {\"actions\": [\"noop\"]}}\n</tool_call>"}}]}
    assert tool_calls_of(qwen_style) == [{"id": "call_0", "name": "act", "arguments": {"actions": ["noop"]}}]
    assert tool_calls_of({"choices": [{"message": {"content": "plain"}}]}) == []


def _decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        tag, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(tag + body) & 0xFFFFFFFF == crc
        if tag == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif tag == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, _, color_type = header[:4]
    return width, height, color_type, zlib.decompress(idat)


def test_png_data_url_from_pixels():
    pixels = [[[255, 0, 0], [0, 255, 0]], [[0, 0, 255], [10, 20, 30]]]
    png = image_to_png_bytes(pixels)
    width, height, color_type, raw = _decode_png(png)
    assert (width, height, color_type) == (2, 2, 2)
    assert raw == bytes([0, 255, 0, 0, 0, 255, 0, 0, 0, 0, 255, 10, 20, 30])
    numpy = pytest.importorskip("numpy")
    assert image_to_png_bytes(numpy.array(pixels, dtype=numpy.uint8)) == png
    with pytest.raises(ValueError):
        image_to_png_bytes([[[300, 0, 0]]])
    with pytest.raises(ValueError):
        image_to_png_bytes(b"GIF89a")


def test_vision_messages_follow_policy_knobs():
    frames = [[[[i, i, i]]] for i in range(4)]
    text_only = build_user_message("obs", frames, VisionSettings.from_policy_config({}))
    assert text_only == {"role": "user", "content": "obs"}

    settings = VisionSettings.from_policy_config({"use_vision": True, "max_images_per_message": 2})
    message = build_user_message("obs", frames, settings)
    parts = message["content"]
    assert parts[0] == {"type": "text", "text": "obs"}
    assert [p["type"] for p in parts[1:]] == ["image_url", "image_url"]
    for part, expected_value in zip(parts[1:], (2, 3), strict=True):  # the most recent images are kept
        url = part["image_url"]["url"]
        assert url.startswith("data:image/png;base64,")
        raw = _decode_png(base64.b64decode(url.split(",", 1)[1]))[3]
        assert raw == bytes([0, expected_value, expected_value, expected_value])

    image_only = build_user_message("obs", frames[:1], VisionSettings.from_policy_config({"image_only_mode": "true"}))
    assert [p["type"] for p in image_only["content"]] == ["image_url"]
    assert build_user_message("obs", [], VisionSettings(True, True, 1)) == {"role": "user", "content": "obs"}
    with pytest.raises(ValueError):
        VisionSettings.from_policy_config({"use_vision": True, "max_images_per_message": 0})


def test_contract_shapes():
    with pytest.raises(ValidationError):
        RolloutRequest.model_validate({"run_id": "r", "env": {}, "policy": {}, "ops": []})
    request = RolloutRequest.model_validate({"run_id": "r", "env": {}, "policy": {}, "ops": ["agent"], "mode": "rl",
                                             "custom": 1})
    assert request.record.trace_format == "compact" and request.safety.max_ops == 100000
    assert request.model_dump()["custom"] == 1
    info = TaskInfo.model_validate({"task": {"id": "t", "name": "T"}, "environment": "e", "action_space": {}})
    assert info.model_dump()["action_space"] == {} and info.limits.max_turns is None
    doc = {"run_id": "r", "trajectories": [{"env_id": "e", "policy_id": "p", "length": 1, "inference_url": "u",
                                            "steps": [{"obs": {}, "tool_calls": [], "info": {}}]}],
           "metrics": {"episode_returns": [0.0], "mean_return": 0.0, "num_steps": 1}}
    response = RolloutResponse.model_validate(doc).model_dump()
    assert set(response) == {"run_id", "trajectories", "branches", "metrics", "aborted", "ops_executed",
                             "trace_correlation_id", "trace", "pipeline_metadata"}
    assert rl_response_problems(response) == [
        "pipeline_metadata.inference_url is missing",
        "trajectories[0].steps[0].info.meta.inference_url is missing",
    ]


def test_registry_aliases():
    def factory():
        raise AssertionError("not called")

    register_task_app(entry=TaskAppEntry(app_id="reg-a", description="", config_factory=factory, aliases=("ra",)))
    try:
        assert get_registered("ra").app_id == "reg-a"
        with pytest.raises(ValueError):
            register_task_app(entry=TaskAppEntry(app_id="reg-b", description="", config_factory=factory,
                                                 aliases=("ra",)))
        register_task_app(entry=TaskAppEntry(app_id="reg-a", description="v2", config_factory=factory))
        assert get_registered("reg-a").description == "v2" and get_registered("ra") is None
    finally:
        unregister_task_app("reg-a")
    with pytest.raises(ValueError):
        TaskAppConfig(app_id="", name="", description="", base_task_info={"task": {"id": "t", "name": "t"},
                                                                          "environment": "e"},
                      describe_taskset=dict, provide_task_instances=list, rollout=lambda r, q: None)


def test_tool_calls_of_tolerates_a_misbehaving_model_server() -> None:
    from synth_ai.taskapp.inference import tool_calls_of

    for broken in ({"choices": "nope"}, {"choices": [None]}, {"choices": [{"message": "text"}]},
                   {"choices": [{"message": {"tool_calls": "x"}}]},
                   {"choices": [{"message": {"tool_calls": [None, 3, {"function": "f"}]}}]}):
        calls = tool_calls_of(broken)
        assert isinstance(calls, list)
    good = {"choices": [{"message": {"tool_calls": [7, {"id": "c1", "function": {"name": "math_submit",
                                                                                  "arguments": "{\"answer\": \"4\"}"}}]}}]}
    assert tool_calls_of(good) == [{"id": "c1", "name": "math_submit", "arguments": {"answer": "4"}}]
