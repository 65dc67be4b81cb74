"""Image payloads checked once and cut short before the rules parse a line (`synth_ai.datasets.image_payloads`).

The cut must never change a verdict: a payload is cut only when it is strict base64 within the size limit, and
only where it is certainly the value of a "url" key; the rules then give the short line the original's result.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib

import pytest

from synth_ai.datasets import scan as scan_module
from synth_ai.datasets.image_payloads import payload_ok, shorten
from synth_ai.datasets.records import RecordOptions, check_line
from synth_ai.datasets.validate import path_text, validate_jsonl

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 40
B64 = base64.b64encode(PNG).decode()
OPTS = RecordOptions()


def line_of(record: dict, **dumps) -> bytes:
    return json.dumps(record, **dumps).encode()


def image_record(url: str, text: str = "look") -> dict:
    return {"messages": [
        {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]},
        {"role": "assistant", "content": "a tree"}]}


def cut(line: bytes, max_bytes: int = 10 << 20) -> bytes | None:
    return shorten(line, 0, len(line), max_bytes)


def test_a_valid_payload_is_cut_to_its_first_16_characters_and_the_result_is_unchanged():
    for dumps in ({}, {"separators": (",", ":")}):
        line = line_of(image_record(f"data:image/png;base64,{B64}"), **dumps)
        short = cut(line)
        assert short is not None and len(short) < 300
        assert json.loads(short)["messages"][0]["content"][1]["image_url"]["url"] == "data:image/png;base64," + B64[:16]
        assert check_line(short, OPTS) == check_line(line, OPTS)
        assert check_line(line, OPTS).images == 1 and not check_line(line, OPTS).errors


def test_a_second_url_key_in_the_same_object_is_cut_too():
    record = image_record(f"data:image/png;base64,{B64}")
    record["messages"][0]["content"][1]["image_url"] = {"detail": "low", "url": f"data:image/png;base64,{B64}"}
    line = line_of(record)
    assert cut(line) is not None
    assert check_line(cut(line), OPTS) == check_line(line, OPTS)


@pytest.mark.parametrize("payload", [
    B64[:-4] + "!!!!",  # outside the alphabet
    B64[:100] + "==" + B64[102:],  # padding inside
    B64[:-1],  # length not a multiple of 4
    "",  # empty
])
def test_a_payload_that_is_not_strict_base64_stays_for_the_rules_to_report(payload):
    line = line_of(image_record(f"data:image/png;base64,{payload}"))
    assert cut(line) is None
    assert check_line(line, OPTS).errors


def test_a_payload_above_the_size_limit_stays_for_the_rules_to_report():
    line = line_of(image_record(f"data:image/png;base64,{B64}"))
    assert cut(line, max_bytes=len(PNG) - 1) is None
    assert cut(line, max_bytes=len(PNG)) is not None


def test_padding_at_the_end_of_a_decoding_piece_is_refused():
    # Each 128 KiB piece alone would be valid base64 here; the payload as a whole has "==" inside.
    piece = base64.b64encode(bytes(98_302)).decode()  # 131,072 characters ending in "=="
    assert len(piece) == 1 << 17 and piece.endswith("==")
    payload = (piece + base64.b64encode(PNG).decode()).encode()
    assert not payload_ok(payload, 0, len(payload), 10 << 20)
    good = base64.b64encode(bytes(98_304) + PNG)
    assert payload_ok(good, 0, len(good), 10 << 20)


@pytest.mark.parametrize("text", [
    'he wrote "data:image/png;base64,' + B64,  # an escaped quote opens it: not a url value
    '{"url": "data:image/png;base64,' + B64,  # looks like a url key, but escaped inside a string
])
def test_a_data_url_inside_text_is_never_cut(text):
    record = image_record("https://example.invalid/a.png", text=text)
    line = line_of(record)
    short = cut(line)
    assert short is None or check_line(short, OPTS) == check_line(line, OPTS)
    assert check_line(line, OPTS).text_chars == len(text) + len("a tree")


def test_a_header_with_an_escape_is_left_alone():
    # "\u002c" is a comma to JSON: the payload would start elsewhere than the first literal comma says.
    line = line_of(image_record("x")).replace(b'"x"', b'"data:image/png\\u002cAAAA;base64,' + B64.encode() + b'"')
    assert cut(line) is None


def test_a_file_validates_the_same_with_and_without_cutting(tmp_path, monkeypatch):
    lines = [line_of(image_record(f"data:image/png;base64,{B64}")),
             line_of(image_record(f"data:image/jpeg;base64,{B64}")),  # a media-type warning
             line_of(image_record(f"data:image/png;base64,{B64}")) + b" {",  # invalid JSON after the image
             line_of(image_record(f"data:image/png;base64,{B64[:-4]}!!!!")),
             line_of({"messages": [{"role": "user", "content": "hi"}], "metadata": {"url": f"data:x;base64,{B64}"}})]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    monkeypatch.setattr(scan_module, "_SHORTEN_MIN", 0)
    cutting = validate_jsonl(path, model="synth-ai/tiny-qwen3-vl").to_dict()
    monkeypatch.setattr(scan_module, "_SHORTEN_MIN", 1 << 40)
    whole = validate_jsonl(path, model="synth-ai/tiny-qwen3-vl").to_dict()
    assert cutting == whole
    assert whole["error_count"] == 3 and whole["warning_count"] == 1
    assert "at column" in whole["errors"][0]["message"]  # the original line's own column


@pytest.mark.parametrize("given", ["a.jsonl", "./a.jsonl", "dir//a.jsonl", "dir/./a.jsonl/", "/abs//a", "//net/a",
                                   "///root/a", "", ".", "..", "../x/../y", "a b/ c", "dir/.hidden"])
def test_path_text_names_a_file_as_pathlib_does(given):
    assert path_text(given) == str(pathlib.Path(given))
    assert path_text(pathlib.Path(given)) == str(pathlib.Path(given))


@pytest.mark.parametrize("mapped", [True, False])  # False: the chunked read kept for files that cannot be mapped
def test_the_reader_gives_the_lines_of_a_plain_read(tmp_path, monkeypatch, mapped):
    from synth_ai.datasets import reader as reader_module
    from synth_ai.datasets.reader import LineReader

    monkeypatch.setattr(reader_module, "_MAPPABLE", mapped)

    data = b"".join(os.urandom(n).replace(b"\n", b"x") + b"\n" for n in (0, 1, 5000, 70_000, 3, 0)) + b"tail"
    path = tmp_path / "lines.jsonl"
    path.write_bytes(data)
    expected = data.split(b"\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert list(LineReader(empty, hash=False)) == []
    for chunk in (16, 4096, 1 << 20):
        got = [bytes(line) for _, line in LineReader(path, hash=False, chunk_size=chunk)]
        assert got == expected
        reader = LineReader(path, hash=True, chunk_size=chunk)
        list(reader)
        import hashlib

        assert reader.sha256 == hashlib.sha256(data).hexdigest() and reader.bytes_read == len(data)
