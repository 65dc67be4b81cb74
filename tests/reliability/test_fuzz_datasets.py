"""Fuzzing the SFT JSONL validator (`synth_ai.datasets`) with hypothesis.

Properties, over files made of arbitrary bytes, broken JSON and chat records built from a grammar that strays
(wrong roles, odd content parts, images as good and bad data URLs, paths that try `../`, tool calls, deep nesting):
- `validate_jsonl` never raises: it returns a report whose every error carries a line inside the file;
- the msgspec fast path and the full rules agree on every verdict and count;
- cutting checked image payloads short before the rules parse a line changes no report (`payloads.shorten`);
- `iter_normalized_records` yields exactly the valid examples, and the normalised records round-trip (written
  out again, they validate and normalise to themselves);
- through the CLI (`files validate --json`): one JSON document, exit 0 or 3, no traceback.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth_ai.datasets import iter_normalized_records, validate_jsonl

CI = settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SOAK = settings(max_examples=5000, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
MODELS = (None, "synth-ai/tiny-qwen3", "synth-ai/tiny-qwen3-vl")

# A real 1x1 PNG, so some images pass the magic-number and size checks.
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8ffff3f0005fe02"
    "fea7d605b40000000049454e44ae426082")).decode()

TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["", " ", "hi", "\x00", "\ud7ff", "../../x"]))
URLS = st.one_of(TEXT, st.sampled_from([
    f"data:image/png;base64,{PNG}", "data:image/png;base64,!!", "data:image/jpeg;base64," + PNG,
    "https://example.invalid/y.png", "file:///etc/passwd", "../../x.png", "/etc/shadow", "data:,",
    "data:image/png;base64,"]))
PARTS = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}),
    st.fixed_dictionaries({"type": st.sampled_from(["image_url", "image"]),
                           "image_url": st.one_of(URLS, st.fixed_dictionaries({"url": URLS}))}),
    st.dictionaries(st.sampled_from(["type", "text", "image_url", "image"]),
                    st.one_of(TEXT, st.none(), st.integers(), st.floats())),
)
CONTENT = st.one_of(TEXT, st.none(), st.lists(PARTS, max_size=3), st.integers())
ARGUMENTS = st.one_of(TEXT, st.sampled_from(['{"a": 1}', "[1]", "{", '{"a": ' + "[" * 2000 + "]" * 2000 + "}"]),
                      st.dictionaries(TEXT, st.integers(), max_size=2))
TOOL_CALLS = st.one_of(
    st.fixed_dictionaries({"id": TEXT, "type": st.just("function"),
                           "function": st.fixed_dictionaries({"name": TEXT, "arguments": ARGUMENTS})}),
    st.dictionaries(TEXT, TEXT, max_size=2))
MESSAGES = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool", "bot", "", "USER"]), "content": CONTENT},
        optional={"tool_calls": st.lists(TOOL_CALLS, max_size=2), "name": TEXT, "tool_call_id": TEXT,
                  "reasoning": st.one_of(TEXT, st.integers())}),
    st.dictionaries(TEXT, CONTENT, max_size=2), st.integers(), st.none())
RECORDS = st.one_of(
    st.fixed_dictionaries(
        {"messages": st.lists(MESSAGES, max_size=4)},
        optional={"tools": st.one_of(st.lists(st.dictionaries(TEXT, TEXT, max_size=2), max_size=2), TEXT),
                  "images": st.lists(URLS, max_size=2), "image": URLS,
                  "metadata": st.dictionaries(TEXT, TEXT, max_size=2)}),
    st.lists(st.integers(), max_size=2), TEXT, st.none())
LINES = st.one_of(
    RECORDS.map(lambda r: json.dumps(r).encode()),
    RECORDS.map(lambda r: json.dumps(r, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    st.binary(max_size=40),
    st.sampled_from([b"", b"   ", b"\r", b"{", b"[]", b"\xef\xbb\xbf{}", b'{"messages": [' * 3000,
                     b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", b"NaN", b'{"messages": NaN}']),
)
FILES = st.lists(LINES, max_size=6).map(b"\n".join)


def _summary(report) -> tuple:
    s = report.summary
    return (report.ok, report.error_count, report.warning_count, s.records, s.examples, s.invalid_records,
            s.messages, s.images, s.images_trimmed, s.tool_calls, s.text_chars)


def _check_file(tmp_path: Path, data: bytes, model: str | None) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(data)
    fast = validate_jsonl(path, model=model, fast=True)
    full = validate_jsonl(path, model=model, fast=False)
    assert _summary(fast) == _summary(full)
    assert [i.to_dict() for i in fast.errors] == [i.to_dict() for i in full.errors]
    for issue in fast.errors + fast.warnings:
        assert issue.line is None or 1 <= issue.line <= fast.summary.lines, issue
    records = [r for _, r in iter_normalized_records(path, model=model, on_error="skip")]
    assert len(records) == fast.summary.examples
    if records:  # normalised records are themselves valid and already normal
        again = tmp_path / "again.jsonl"
        again.write_text("".join(json.dumps(r) + "\n" for r in records))
        assert validate_jsonl(again, model=model).ok
        assert [r for _, r in iter_normalized_records(again, model=model)] == records


# Image-heavy records for the payload cut: good, bad and mislabelled data URLs as urls, as texts and as metadata,
# texts that look like url keys, lines cut anywhere (inside a payload too) or followed by junk.
CUT_URLS = st.sampled_from([
    f"data:image/png;base64,{PNG}", f"data:image/jpeg;base64,{PNG}", f"data:image/png;base64,{PNG[:-4]}!!!!",
    f"data:image/png;base64,{PNG[:40]}=={PNG[42:]}", f"data:text/plain;base64,{PNG}", f"data:image/png,{PNG}",
    "data:image/png;base64,", f'x", "url": "data:image/png;base64,{PNG}', f'{{"url": "data:image/png;base64,{PNG}',
    "https://example.invalid/y.png"])
CUT_PARTS = st.one_of(
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries(
        {"url": CUT_URLS}, optional={"detail": TEXT})}),
    st.fixed_dictionaries({"type": st.sampled_from(["text", "image"]), "text": st.one_of(TEXT, CUT_URLS)}))
CUT_RECORDS = st.fixed_dictionaries(
    {"messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "bot"]),
                                                 "content": st.one_of(st.lists(CUT_PARTS, max_size=3), TEXT)}),
                          max_size=3)},
    optional={"metadata": st.dictionaries(st.sampled_from(["url", "x"]), CUT_URLS, max_size=1)})
CUT_LINES = st.one_of(
    CUT_RECORDS.map(lambda r: json.dumps(r).encode()),
    CUT_RECORDS.map(lambda r: json.dumps(r, separators=(",", ":")).encode()),
    st.tuples(CUT_RECORDS, st.integers(1, 200)).map(lambda t: json.dumps(t[0]).encode()[:-t[1]]),
    CUT_RECORDS.map(lambda r: json.dumps(r).encode() + b" {"),
    LINES)
CUT_FILES = st.lists(CUT_LINES, max_size=6).map(b"\n".join)


def _cut_or_whole(tmp_path: Path, data: bytes, model: str | None) -> None:
    import synth_ai.datasets.scan as module

    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(data)
    saved = module._SHORTEN_MIN
    try:
        module._SHORTEN_MIN = 0  # every line with a payload is cut
        cut = validate_jsonl(path, model=model).to_dict()
        module._SHORTEN_MIN = 1 << 40  # none is
        whole = validate_jsonl(path, model=model).to_dict()
    finally:
        module._SHORTEN_MIN = saved
    assert cut == whole


test_cutting_payloads_changes_no_report = CI(given(data=CUT_FILES, model=st.sampled_from(MODELS))(_cut_or_whole))
test_validator_never_crashes_and_paths_agree = CI(given(data=FILES, model=st.sampled_from(MODELS))(_check_file))
test_validator_never_crashes_and_paths_agree_soak = pytest.mark.soak(
    SOAK(given(data=FILES, model=st.sampled_from(MODELS))(_check_file)))


def _cli(tmp_path: Path, data: bytes) -> None:
    from conftest import run_cli

    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(data)
    result = run_cli("files", "validate", str(path), "--json")
    assert result.exit_code in (0, 3), (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert (result.exit_code == 0) == (doc.get("ok") is True), doc


test_cli_validate_answers_in_json = settings(CI, max_examples=30)(given(data=FILES)(_cli))
