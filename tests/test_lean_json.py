"""`synth_ai.lean_json` must be `json` exactly: the same values, the same exceptions, the same text.

It parses and escapes through `_json`, as `json` does, and hands anything unusual to `json` itself; these tests
compare both on generated documents and on the inputs where the two could part (encodings, BOMs, whitespace,
constants, huge numbers, surrogates, trailing data, non-JSON types).
"""

from __future__ import annotations

import json
import math
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth_ai.lean_json import dumps, loads

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
DOCUMENTS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=25)


def same(a, b) -> bool:
    """Equal values of equal types all the way down (NaN equals NaN; 1 is not 1.0 or True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def outcome(fn, data):
    try:
        return ("value", fn(data))
    except Exception as exc:  # the exception's type and text are part of what must match
        return ("error", type(exc), str(exc))


def assert_parses_like_json(data) -> None:
    ours, theirs = outcome(loads, data), outcome(json.loads, data)
    assert ours[0] == theirs[0], (data, ours, theirs)
    if ours[0] == "value":
        assert same(ours[1], theirs[1]), data
    else:
        assert ours == theirs


@settings(max_examples=300, deadline=None)
@given(DOCUMENTS, st.sampled_from(["", " ", "\n", "\t\r\n "]), st.booleans(), st.booleans())
def test_generated_documents_parse_to_what_json_gives(doc, pad, ascii_only, as_bytes):
    text = pad + json.dumps(doc, ensure_ascii=ascii_only) + pad
    assert_parses_like_json(text.encode("utf-8") if as_bytes else text)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=24) | st.text(max_size=24).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_arbitrary_bytes_fail_or_succeed_as_with_json(data):
    assert_parses_like_json(data)


@pytest.mark.parametrize("data", [
    b"", b" ", b"{", b"{}", b"{} x", b"{}\n", b"[1, 2,]", b'{"a": 1, "a": 2}', b'{"a": NaN, "b": -Infinity}',
    b'{"n": ' + b"7" * 5000 + b"}", b'{"n": 1e400}', b'{"n": -0.0, "m": 1E-7}', '{"s": "\\ud800"}'.encode(),
    b'{"s": "\xed\xa0\x80"}', b'{"s": "\xff"}', b"\xef\xbb\xbf{}", "{}".encode("utf-16"), "{}".encode("utf-16-le"),
    "{}".encode("utf-32"), b"\x00{", b"{\x00", b'"plain"', b"  [ ]  ", b"[" * 100_000, b'{"t": "tab\there"}',
    "\ufeff{}", "  {}  ", '{"é": "ü"}', bytearray(b'{"a": [1]}'), memoryview(b'{"a": [1]}'),
])
def test_inputs_where_a_shortcut_could_part_from_json(data):
    if isinstance(data, memoryview):  # json.loads takes no buffers; ours reads one as its bytes
        assert same(loads(data), json.loads(bytes(data)))
    else:
        assert_parses_like_json(data)


def reference_dumps(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


@settings(max_examples=300, deadline=None)
@given(DOCUMENTS)
def test_generated_documents_are_written_as_json_writes_them(doc):
    assert dumps(doc) == reference_dumps(doc)


@pytest.mark.parametrize("value", [
    {"path": Path("/x"), "day": date(2026, 1, 2)}, {1: "int key", None: "null key", 2.5: "float key"},
    {"t": (1, [2, ()]), "empty": {}, "nothing": []}, [float("nan"), float("inf"), -float("inf")],
    {"big": 10**5000}, {"bool": True, "int": 1, "float": 1.0, "tiny": 5e-324, "huge": 1e308},
    {"text": 'quote " backslash \\ newline \n tab \t nul \x00 é ☃ \ud800'},
])
def test_values_beyond_json_types_are_written_or_refused_as_json_does(value):
    assert outcome(dumps, value) == outcome(reference_dumps, value)


def test_a_cycle_is_refused_as_json_refuses_it():
    cycle: list = []
    cycle.append(cycle)
    assert outcome(dumps, cycle) == outcome(reference_dumps, cycle)
