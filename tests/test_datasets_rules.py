"""The SFT dataset rules: every record rule, images, tools, legacy fields, normalisation and the report."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from synth_ai.datasets import (
    DatasetReport,
    ensure_valid,
    first_n_records,
    iter_normalized_records,
    trim_images,
    validate_jsonl,
)
from synth_ai.datasets.images import check_image_url, sniff_image_format
from synth_ai.errors import InvalidInputError, NotFoundError

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(200)
GIF = b"GIF89a" + bytes(100)
WEBP = b"RIFF\x00\x00\x00\x00WEBPVP8 " + bytes(100)


def data_url(raw: bytes = PNG, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def chat(*user_parts, answer: str = "ok") -> dict:
    content = list(user_parts) if user_parts else "hello"
    return {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": answer}]}


def write(tmp_path: Path, *lines, name: str = "data.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return path


def errors_of(report: DatasetReport) -> list[tuple[int | None, str]]:
    return [(e.line, e.message) for e in report.errors]


def only_error(report: DatasetReport) -> tuple[int | None, str]:
    assert not report.ok
    assert report.error_count == 1, report.render()
    return errors_of(report)[0]


# --- a valid file and its summary ----------------------------------------------------------------------------

def test_valid_file_summary_and_sha256(tmp_path):
    tool_record = {
        "messages": [
            {"role": "system", "content": "You play Crafter."},
            {"role": "user", "content": "what now?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "act", "arguments": '{"a": 1}'}}]},
            {"role": "tool", "tool_call_id": 7, "content": "done"},
            {"role": "assistant", "content": "moved"},
        ],
        "tools": [{"name": "act", "description": "do it", "parameters": {"type": "object"}}],
        "metadata": {"seed": 1},
    }
    path = write(tmp_path, chat(), tool_record, chat({"type": "text", "text": "see"}, image_part(data_url())))
    report = validate_jsonl(path)
    assert report.ok, report.render()
    s = report.summary
    assert (s.lines, s.records, s.examples, s.messages, s.images, s.tool_calls) == (3, 3, 3, 9, 1, 1)
    assert s.approx_tokens == (s.text_chars + 3) // 4 and s.text_chars > 0
    assert s.bytes == path.stat().st_size
    assert report.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert "valid SFT dataset" in report.render() and "3 examples" in report.render()
    doc = report.to_dict()
    assert doc["ok"] is True and doc["errors"] == [] and doc["summary"]["examples"] == 3


# --- record-level rules -------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{bad json", "invalid JSON (Expecting property name enclosed in double quotes at column 2)"),
        ("[1, 2]", "record is not an object"),
        ('"just text"', "record is not an object"),
        ({"prompt": "hi", "completion": "there"}, "missing messages[] list"),
        ({"messages": "user: hi"}, "messages must be a list (found string)"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "missing messages[] with at least 2 turns (found 1)"),
        ({"messages": []}, "missing messages[] with at least 2 turns (found 0)"),
        ({"messages": ["hi", {"role": "assistant", "content": "x"}]}, "message 0 is not an object (found string)"),
        ({"messages": [{"content": "hi"}, {"role": "assistant", "content": "x"}]},
         "message 0 has invalid role (missing"),
        ({"messages": [{"role": 3, "content": "hi"}, {"role": "assistant", "content": "x"}]},
         "message 0 has invalid role (found 3"),
        ({"messages": [{"role": "bot", "content": "hi"}, {"role": "assistant", "content": "x"}]},
         "message 0 has invalid role 'bot' (expected one of system, user, assistant, tool)"),
        ({"messages": [{"role": "user", "content": 5}, {"role": "assistant", "content": "x"}]},
         "message 0 has unsupported content type number"),
        ({"messages": [{"role": "user", "content": "a", "name": 1}, {"role": "assistant", "content": "x"}]},
         "message 0 name must be a string if present (found number)"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x", "reasoning": []}]},
         "message 1 reasoning must be a string if present (found list)"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x", "raw_content": {}}]},
         "message 1 raw_content must be a string if present (found object)"),
        ({**chat(), "metadata": [1]}, "metadata must be an object if present (found list)"),
    ],
)
def test_record_rules(tmp_path, line, expected):
    path = write(tmp_path, chat(), line)
    lineno, message = only_error(validate_jsonl(path))
    assert lineno == 2
    assert message.startswith(expected), message


def test_min_messages_is_configurable(tmp_path):
    one_turn = {"messages": [{"role": "assistant", "content": "x"}]}
    path = write(tmp_path, one_turn)
    assert not validate_jsonl(path).ok
    assert validate_jsonl(path, min_messages=1).ok
    with pytest.raises(InvalidInputError):
        validate_jsonl(path, min_messages=0)


def test_all_problems_of_a_record_are_reported(tmp_path):
    path = write(tmp_path, {"messages": [{"role": 1, "content": 2}, {"role": "assistant", "tool_calls": {}}],
                            "metadata": "x"})
    report = validate_jsonl(path)
    assert report.error_count == 4 and report.summary.invalid_records == 1
    assert all(line == 1 for line, _ in errors_of(report))


def test_content_parts(tmp_path):
    bad_part = chat({"type": "text", "text": 3})
    unknown = chat({"type": "input_audio", "input_audio": {}})
    no_type = chat({"foo": 1})
    not_object = chat(7)
    path = write(tmp_path, bad_part, unknown, no_type, not_object)
    assert errors_of(validate_jsonl(path)) == [
        (1, "message 0 content part 0: a text part needs a string 'text' (found number)"),
        (2, "message 0 content part 0 has unsupported type \"input_audio\" (expected text or image_url)"),
        (3, "message 0 content part 0 has no 'type' (expected text or image_url)"),
        (4, "message 0 content part 0 is not an object (found number)"),
    ]


# --- tool calls and tools ------------------------------------------------------------------------------------

def _with_calls(calls) -> dict:
    return {"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": None,
                                                             "tool_calls": calls}]}


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        ({"function": {"name": "f"}}, "message 1 tool_calls must be a list (found object)"),
        (["call"], "message 1 tool_call 0 is not an object (found string)"),
        ([{"function": {"arguments": "{}"}}], "message 1 tool_call 0 missing function name"),
        ([{"function": {"name": "  "}}], "message 1 tool_call 0 missing function name"),
        ([{"function": {"name": "f", "arguments": "{not json"}}],
         "message 1 tool_call 0: arguments string is not valid JSON (Expecting property name"),
        ([{"function": {"name": "f", "arguments": "[1, 2]"}}],
         "message 1 tool_call 0: arguments must decode to a JSON object (found list)"),
        ([{"function": {"name": "f", "arguments": 5}}],
         "message 1 tool_call 0: arguments must be an object or a JSON string (found number)"),
    ],
)
def test_tool_call_rules(tmp_path, calls, expected):
    lineno, message = only_error(validate_jsonl(write(tmp_path, _with_calls(calls))))
    assert lineno == 1 and message.startswith(expected), message


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        ({"name": "f"}, "tools must be provided as a list when present (found object)"),
        (["f"], "tool 0 is not an object (found string)"),
        ([{"description": "x"}], "tool 0 missing name"),
        ([{"name": ""}], "tool 0 missing name"),
        ([{"name": "f", "description": 3}], "tool 0 description must be a string if present (found number)"),
        ([{"name": "f", "parameters": "x"}], "tool 0 parameters must be an object if present (found string)"),
        ([{"type": "function", "function": {"name": "f", "parameters": []}}],
         "tool 0 parameters must be an object if present (found list)"),
    ],
)
def test_tool_rules(tmp_path, tools, expected):
    lineno, message = only_error(validate_jsonl(write(tmp_path, {**chat(), "tools": tools})))
    assert lineno == 1 and message.startswith(expected), message


def test_tools_and_tool_calls_are_normalised(tmp_path):
    record = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": 12, "function": {"name": "f", "arguments": '{"x": 1}'}},
                {"name": "g", "arguments": {"y": 2}},
                {"function": {"name": "h"}},
            ]},
            {"role": "tool", "tool_call_id": 12, "content": "ok"},
        ],
        "tools": [{"name": "f", "parameters": {"type": "object"}},
                  {"type": "function", "function": {"name": "g", "description": "gee"}}],
        "tool_choice": "auto",
        "custom": [1],
    }
    [(line, out)] = list(iter_normalized_records(write(tmp_path, record)))
    assert line == 1
    assert out["messages"][1]["tool_calls"] == [
        {"id": "12", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
        {"type": "function", "function": {"name": "g", "arguments": {"y": 2}}},
        {"type": "function", "function": {"name": "h", "arguments": {}}},
    ]
    assert out["messages"][2]["tool_call_id"] == "12"
    assert out["tools"] == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "g", "description": "gee"}},
    ]
    assert out["tool_choice"] == "auto" and out["custom"] == [1]


# --- blank lines, empty files, line numbers, error caps ------------------------------------------------------

def test_blank_lines_count_in_line_numbers(tmp_path):
    path = tmp_path / "gaps.jsonl"
    path.write_bytes(b"\n" + json.dumps(chat()).encode() + b"\n   \n\r\n{oops\n\n" + b'{"messages": 1}')
    report = validate_jsonl(path)
    assert errors_of(report) == [
        (5, "invalid JSON (Expecting property name enclosed in double quotes at column 2)"),
        (7, "messages must be a list (found number)"),
    ]
    s = report.summary
    assert (s.lines, s.blank_lines, s.records, s.examples, s.invalid_records) == (7, 4, 3, 1, 2)
    assert "Line 5: invalid JSON" in report.render() and "Line 7:" in report.render()


@pytest.mark.parametrize(("content", "detail"), [(b"", "the file is empty"), (b"\n  \n\n", "every line is blank")])
def test_empty_file(tmp_path, content, detail):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    report = validate_jsonl(path)
    assert errors_of(report) == [(None, f"File contains no SFT examples ({detail})")]
    assert "File contains no SFT examples" in report.render()


def test_crlf_and_bom(tmp_path):
    path = tmp_path / "windows.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(chat()).encode() + b"\r\n" + json.dumps(chat()).encode() + b"\r\n")
    assert validate_jsonl(path).ok


def test_invalid_utf8(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"messages": [{"role": "user", "content": "caf\xe9"}, {"role": "assistant", "content": "x"}]}\n')
    lineno, message = only_error(validate_jsonl(path))
    assert lineno == 1 and message.startswith("not valid UTF-8 text")


def test_a_number_too_long_for_python_is_a_line_error_not_a_crash(tmp_path):
    # json.loads raises a plain ValueError past Python's 4,300-digit int limit; it once escaped as an internal error.
    path = tmp_path / "long-number.jsonl"
    path.write_text(json.dumps(chat())[:-1] + ', "n": ' + "7" * 5000 + "}\n" + json.dumps(chat()) + "\n")
    report = validate_jsonl(path)
    assert errors_of(report) == [(1, "a number has more than 4,300 digits, more than Python decodes (write it as a "
                                     "string)")]
    assert report.summary.records == 2


def test_json_nested_too_deeply_is_a_line_error(tmp_path):
    deep = b"[" * 200_000 + b"]" * 200_000
    path = tmp_path / "deep.jsonl"
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": deep.decode()}}]
    path.write_bytes(json.dumps(chat()).encode() + b"\n" + b'{"messages": ' + deep + b"}\n"
                     + json.dumps({"messages": [{"role": "user", "content": "hi"},
                                                {"role": "assistant", "content": "", "tool_calls": calls}]}).encode()
                     + b"\n")
    report = validate_jsonl(path)
    assert not report.ok
    found = errors_of(report)
    assert [line for line, _ in found] == [2, 3]
    assert "nested too deeply" in found[0][1] and "arguments string is not valid JSON" in found[1][1]

def test_more_errors_than_listed_are_counted(tmp_path):
    path = write(tmp_path, chat(), *(["{"] * 30))
    report = validate_jsonl(path)
    assert report.error_count == 30 and len(report.errors) == 20 and report.errors_omitted == 10
    assert report.errors[0].line == 2 and report.errors[-1].line == 21
    text = report.render()
    assert "(showing first 20 of 30 problems)" in text and "... and 10 more" in text
    assert validate_jsonl(path, max_errors=5).errors[-1].line == 6
    assert validate_jsonl(path, max_errors=0).error_count == 30


# --- images --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,mime", [(PNG, "image/png"), (JPEG, "image/jpeg"), (JPEG, "image/jpg"), (GIF, "image/gif"),
                                      (WEBP, "image/webp")])
def test_supported_image_formats(tmp_path, raw, mime):
    report = validate_jsonl(write(tmp_path, chat(image_part(data_url(raw, mime)))))
    assert report.ok and report.summary.images == 1 and report.warning_count == 0


def test_remote_image_urls(tmp_path):
    path = write(tmp_path, chat(image_part("https://example.com/a.png")), chat(image_part("http://h/b.jpg")))
    assert validate_jsonl(path).ok


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("", "image_url has an empty or missing url"),
        ("   ", "image_url has an empty or missing url"),
        (None, "image_url has an empty or missing url"),
        ("ftp://host/a.png", "image url 'ftp://host/a.png' is not https://, http:// or a data:image/...;base64 URL"),
        ("/tmp/a.png", "is not https://, http:// or a data:image"),
        ("https://", "has no host"),
        ("data:image/png;base64,@@@@" + "A" * 20, "invalid base64: character '@' at offset 0"),
        ("data:image/png;base64,iVBORw0KGgo", "invalid base64: length 11 is not a multiple of 4"),
        ("data:image/png;base64,iV=BORw0", "invalid base64: '=' padding inside the data"),
        ("data:image/png;base64,", "the base64 payload is empty"),
        ("data:image/png;base64,é" + "A" * 3, "invalid base64: the payload has non-ASCII characters"),
        (data_url(b"plain text, not an image", "text/plain"), "data URL has media type text/plain"),
        ("data:image/svg+xml,<svg/>", "data URL for image/svg+xml is not base64-encoded"),
        ("data:image/png", "data URL has no ',' before its payload"),
        (data_url(b"BM" + bytes(64), "image/png"), "data URL declares image/png but its bytes are not a PNG"),
    ],
)
def test_bad_images(tmp_path, url, expected):
    part = {"type": "image_url", "image_url": {"url": url}} if url is not None else {"type": "image_url"}
    lineno, message = only_error(validate_jsonl(write(tmp_path, chat({"type": "text", "text": "x"}, part))))
    assert lineno == 1
    assert message.startswith("message 0 content part 1: ") and expected in message, message


def test_oversized_image(tmp_path):
    path = write(tmp_path, chat(image_part(data_url(PNG + bytes(4000)))))
    assert validate_jsonl(path).ok
    lineno, message = only_error(validate_jsonl(path, max_image_bytes=2000))
    assert message == "message 0 content part 0: image is 4.9 KiB decoded, above the 2.0 KiB limit per image"
    big = write(tmp_path, chat(image_part(data_url(PNG + bytes(11 * 2**20)))), name="big.jsonl")
    _, message = only_error(validate_jsonl(big))
    assert "image is 11.0 MiB decoded, above the 10.0 MiB limit per image" in message


def test_declared_type_mismatch_is_a_warning(tmp_path):
    report = validate_jsonl(write(tmp_path, chat(image_part(data_url(PNG, "image/jpeg")))))
    assert report.ok and report.warning_count == 1
    assert report.warnings[0].message == ("message 0 content part 0: data URL declares image/jpeg but the bytes are "
                                          "PNG")


def test_images_need_a_vision_model(tmp_path):
    path = write(tmp_path, chat(image_part(data_url())), chat())
    assert validate_jsonl(path).ok  # no model named: no gating
    assert validate_jsonl(path, model="Qwen/Qwen3-VL-4B-Instruct").ok
    assert validate_jsonl(path, model="synth-ai/tiny-qwen3-vl").ok
    lineno, message = only_error(validate_jsonl(path, model="Qwen/Qwen3-4B"))
    assert (lineno, message) == (1, "record has 1 image(s) but Qwen/Qwen3-4B accepts text only")
    with pytest.raises(InvalidInputError, match="not supported"):
        validate_jsonl(path, model="Qwen/NoSuchModel")


def test_too_many_images_warned_and_trimmed(tmp_path):
    urls = [data_url(PNG), data_url(JPEG, "image/jpeg"), "https://e.com/3.png"]
    record = chat({"type": "text", "text": "compare"}, *(image_part(u) for u in urls))
    path = write(tmp_path, record)
    report = validate_jsonl(path, model="Qwen/Qwen3-VL-8B-Instruct")
    assert report.ok and report.summary.images == 3 and report.summary.images_trimmed == 2
    assert errors_of(report) == []
    assert report.warnings[0].line == 1
    assert report.warnings[0].message == ("message 0 has 3 images; Qwen/Qwen3-VL-8B-Instruct takes at most 1 per "
                                          "message, so the first 1 is kept and 2 dropped")
    [(_, out)] = list(iter_normalized_records(path, model="Qwen/Qwen3-VL-8B-Instruct"))
    assert out["messages"][0]["content"] == [{"type": "text", "text": "compare"}, image_part(urls[0])]
    [(_, wide)] = list(iter_normalized_records(path, model="Qwen/Qwen3-VL-8B-Instruct", max_images_per_message=5))
    assert len(wide["messages"][0]["content"]) == 4
    assert validate_jsonl(path, model="Qwen/Qwen3-VL-8B-Instruct", max_images_per_message=3).warning_count == 0


def test_trim_images_function():
    messages = [
        {"role": "user", "content": [image_part("https://a/1"), {"type": "text", "text": "t"},
                                     {"type": "image", "image": "https://a/2"}, image_part("https://a/3")]},
        {"role": "assistant", "content": "plain"},
    ]
    trimmed, dropped = trim_images(messages, 1)
    assert dropped == 2
    assert trimmed[0]["content"] == [image_part("https://a/1"), {"type": "text", "text": "t"}]
    assert trimmed[1] is messages[1] and len(messages[0]["content"]) == 4  # inputs untouched
    assert trim_images(messages, 0)[1] == 3
    with pytest.raises(ValueError):
        trim_images(messages, -1)


def test_legacy_image_fields_are_normalised(tmp_path):
    url = data_url()
    records = [
        {"images": [url, {"url": "https://e.com/x.png"}], "messages": [
            {"role": "system", "content": "s"}, {"role": "user", "content": "what is it?"},
            {"role": "assistant", "content": "a cat"}]},
        {"image": url, "messages": [{"role": "user", "content": None}, {"role": "assistant", "content": "b"}]},
        {"image_url": {"url": url}, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "q"}]}, {"role": "assistant", "content": "c"}]},
    ]
    path = write(tmp_path, *records)
    report = validate_jsonl(path)
    assert report.ok and report.summary.images == 4
    out = [rec for _, rec in iter_normalized_records(path)]
    assert out[0]["messages"][1]["content"] == [image_part(url), image_part("https://e.com/x.png"),
                                                {"type": "text", "text": "what is it?"}]
    assert "images" not in out[0] and out[0]["messages"][0]["content"] == "s"
    assert out[1]["messages"][0]["content"] == [image_part(url)] and "image" not in out[1]
    assert out[2]["messages"][0]["content"] == [image_part(url), {"type": "text", "text": "q"}]
    assert "image_url" not in out[2]


def test_legacy_images_problems(tmp_path):
    no_user = {"images": ["https://e.com/a.png"], "messages": [{"role": "system", "content": "s"},
                                                                {"role": "assistant", "content": "a"}]}
    bad = {"images": ["data:image/png;base64,????"], **chat()}
    not_list = {"images": "https://e.com/a.png", **chat()}
    path = write(tmp_path, no_user, bad, not_list)
    assert errors_of(validate_jsonl(path)) == [
        (1, "record-level images field needs a user message to attach the images to"),
        (2, "images[0]: invalid base64: character '?' at offset 0"),
        (3, "images must be a list of image URLs (found string)"),
    ]
    lineno, message = only_error(validate_jsonl(write(tmp_path, {"image": data_url(), **chat()}, name="t.jsonl"),
                                                model="Qwen/Qwen3-8B"))
    assert "accepts text only" in message


def test_image_part_variants_are_normalised(tmp_path):
    record = chat({"type": "image", "image": "https://e.com/a.png"}, {"image_url": "https://e.com/b.png"},
                  {"text": "no type"}, "bare string",
                  {"type": "image_url", "image_url": {"url": "https://e.com/c.png", "detail": "low"}})
    record["messages"][1]["content"] = {"type": "text", "text": "dict content"}
    [(_, out)] = list(iter_normalized_records(write(tmp_path, record)))
    assert out["messages"][0]["content"] == [
        image_part("https://e.com/a.png"), image_part("https://e.com/b.png"),
        {"text": "no type", "type": "text"}, {"type": "text", "text": "bare string"},
        {"type": "image_url", "image_url": {"url": "https://e.com/c.png", "detail": "low"}},
    ]
    assert out["messages"][1]["content"] == [{"type": "text", "text": "dict content"}]


def test_image_helpers():
    assert sniff_image_format(PNG[:12]) == "png" and sniff_image_format(b"RIFF1234WEBP") == "webp"
    assert sniff_image_format(b"BM") is None
    checked = check_image_url(data_url(GIF, "image/gif"))
    assert (checked.kind, checked.format, checked.size, checked.error) == ("data", "gif", len(GIF), None)


def test_no_assistant_message_is_a_warning(tmp_path):
    path = write(tmp_path, {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]})
    report = validate_jsonl(path)
    assert report.ok and [w.message for w in report.warnings] == [
        "no assistant message: the record has nothing to learn from"]


# --- API helpers ---------------------------------------------------------------------------------------------

def test_missing_file_and_directory(tmp_path):
    with pytest.raises(NotFoundError, match="Dataset not found: .*nope.jsonl"):
        validate_jsonl(tmp_path / "nope.jsonl")
    with pytest.raises(InvalidInputError, match="directory"):
        validate_jsonl(tmp_path)


def test_ensure_valid(tmp_path):
    good = write(tmp_path, chat(), name="good.jsonl")
    assert ensure_valid(good).ok
    bad = write(tmp_path, chat(), "{", {"messages": 2}, name="bad.jsonl")
    with pytest.raises(InvalidInputError) as info:
        ensure_valid(bad)
    err = info.value
    assert err.message.startswith(f"{bad}: Dataset validation failed in 2 of 3 records (2 problems):")
    assert " - Line 2: invalid JSON" in err.message and " - Line 3: messages must be a list" in err.message
    assert err.details["errors"][0] == {"line": 2, "message": err.details["errors"][0]["message"]}
    assert "docs/datasets.md" in err.hint


def test_iter_normalized_records_errors_and_limit(tmp_path):
    path = write(tmp_path, chat(answer="1"), "", {"messages": 1}, chat(answer="4"), chat(answer="5"))
    with pytest.raises(InvalidInputError, match=r"data.jsonl: Line 3: messages must be a list"):
        list(iter_normalized_records(path))
    skipped = list(iter_normalized_records(path, on_error="skip"))
    assert [line for line, _ in skipped] == [1, 4, 5]
    assert [line for line, _ in iter_normalized_records(path, on_error="skip", limit=2)] == [1]
    assert skipped[0][1] == chat(answer="1")


def test_limit(tmp_path):
    path = write(tmp_path, chat(), "", chat(), "{", chat())
    report = validate_jsonl(path, limit=2)
    assert report.ok and report.summary.records == 2 and report.sha256 is None
    assert report.summary.bytes == len(json.dumps(chat())) * 2 + 3
    assert not validate_jsonl(path, limit=3).ok
    with pytest.raises(InvalidInputError, match="positive"):
        validate_jsonl(path, limit=0)


def test_first_n_records(tmp_path):
    path = tmp_path / "src.jsonl"
    path.write_bytes(b"\n" + b"\n".join(json.dumps(chat(answer=str(i))).encode() for i in range(5)) + b"\n\n")
    dest = tmp_path / "sub" / "head.jsonl"
    assert first_n_records(path, 3, dest) == 3
    assert [json.loads(ln)["messages"][1]["content"] for ln in dest.read_text().splitlines()] == ["0", "1", "2"]
    assert first_n_records(path, 50, dest) == 5
    with pytest.raises(InvalidInputError, match="Example limit must be positive"):
        first_n_records(path, 0, dest)
    with pytest.raises(NotFoundError):
        first_n_records(tmp_path / "missing.jsonl", 1, dest)


@pytest.mark.parametrize("simd", [True, False], ids=["pybase64", "translate"])
def test_fast_and_full_paths_agree_on_every_record(tmp_path, monkeypatch, simd):
    """The msgspec fast path may only vouch for records the full rules accept, with the same counts, whether it
    checks base64 with pybase64's decoder or (without pybase64) with `bytes.translate`."""
    pytest.importorskip("msgspec")
    from synth_ai.datasets import fastpath

    if simd:
        pytest.importorskip("pybase64")
    else:
        monkeypatch.setattr(fastpath, "_b64decode_simd", None)
    valid = [
        chat(), chat(image_part(data_url())),
        chat({"type": "text", "text": "é ü"}, image_part(data_url(WEBP, "image/webp"))),
        chat(image_part(data_url(PNG)), image_part("https://e.com/a.png")),
        _with_calls([{"function": {"name": "f", "arguments": '{"a": [1]}'}}]),
        _with_calls([{"function": {"name": "f", "arguments": "  "}}]),
        {**chat(), "tools": [{"type": "function", "function": {"name": "f"}}], "metadata": {}},
        {"messages": [{"role": "user", "content": "x", "reasoning": "think"},
                      {"role": "assistant", "content": "y", "reasoning": ""}]},
        chat(image_part(data_url(PNG).replace(";base64", ";name=a=b;base64"))),
        {"messages": [{"role": "user", "content": [{"text": "type last", "type": "text"}]},
                      {"role": "assistant", "content": [], "tool_calls": None}], "tools": [], "metadata": None,
         "images": None},
    ]
    unusual = [  # valid or not, but each leaves the fast path for the full rules
        chat(image_part("HTTPS://E.COM/A.PNG")), chat(image_part(data_url(PNG, "image/jpeg"))),
        chat(image_part(data_url(PNG).replace("/", "\\/"))), chat(image_part("https:// ")),
        _with_calls([{"function": {"name": "f", "arguments": "[]"}}]),
        _with_calls([{"function": {"name": "f", "arguments": "NaN"}}]),
        {**chat(), "tools": [{"name": "f", "parameters": 1}]},
        {"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]},
        {"image": data_url(), **chat()},
        chat(image_part(data_url(PNG)[:60] + "=" + data_url(PNG)[61:])),
        chat(image_part(data_url(PNG).replace("image/png", "image\\/png"))),
        chat(image_part(data_url(PNG)[:-4] + "====")), chat(image_part(data_url(PNG)[:-4] + "A=A=")),
        chat(image_part(data_url(PNG)[:-1] + " ")), chat(image_part(data_url(PNG)[:-4] + "-_AA")),
        chat(image_part(data_url(PNG)[:-3])), chat(image_part("data:image/png;base64,")),
        chat(image_part("data:image/png;base64," + base64.b64encode(b"not an image at all").decode())),
    ]
    lines = [json.dumps(r) for r in valid + unusual]
    lines.append('{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": NaN}]}')
    path = write(tmp_path, *lines)
    for model in (None, "Qwen/Qwen3-VL-4B-Instruct", "Qwen/Qwen3-4B"):
        fast = validate_jsonl(path, model=model)
        full = validate_jsonl(path, model=model, fast=False)
        assert fast.to_dict() == full.to_dict()

    from synth_ai.datasets.fastpath import fast_record
    from synth_ai.datasets.validate import record_options

    opts = record_options()
    assert all(fast_record(line.encode(), opts) is not None for line in lines[:len(valid)])
    assert all(fast_record(line.encode(), opts) is None for line in lines[len(valid):])
