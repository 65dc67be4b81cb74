"""`json.loads`, and the CLI's indented `json.dumps`, without importing `json` when the input is ordinary.

`import json` is about 13 ms of a 30 ms `synth-ai files validate` start (it imports `re` and `enum` and compiles
six regular expressions), more than checking a 30 MB dataset. The parsing and the string escaping are C functions
of `_json`, the accelerator that `json` itself calls; this module calls them the way `json` does. Whatever is not
ordinary (a parse error, a text encoding other than UTF-8, a value of a type other than JSON's, NaN) goes to `json`
itself, so every result and every exception is exactly json's.
"""

from __future__ import annotations

try:
    import _json
except ImportError:  # another Python: `json` does everything
    _json = None

_WHITESPACE = " \t\n\r"  # JSON's whitespace, as json's WHITESPACE pattern has it
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}
# First bytes for which json's `detect_encoding` may pick another codec than UTF-8 (BOMs, UTF-16/32's zeros).
_NOT_UTF8_START = frozenset((0x00, 0xEF, 0xFE, 0xFF))


class _DecoderSettings:
    """The attributes `_json.make_scanner` reads from a `json.JSONDecoder()`: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


_scan = _json.make_scanner(_DecoderSettings()) if _json is not None else None


def loads(data: str | bytes | bytearray | memoryview):
    """`json.loads(data)` (a buffer is read as bytes): the same value, or the same exception."""
    text = _as_text(data) if _scan is not None else None
    if text is not None:
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = _scan(text, start)
        except Exception:  # no value, or a bad one: json raises its own error below
            pass
        else:
            if end == len(text) or not text[end:].strip(_WHITESPACE):
                return value
    import json

    return json.loads(data if isinstance(data, (str, bytes, bytearray)) else bytes(data))


def _as_text(data) -> str | None:
    """The text `json.loads` would decode from `data`, when that is plain UTF-8 (None: leave it to json)."""
    if isinstance(data, str):
        return data
    if not data or data[0] in _NOT_UTF8_START or (len(data) > 1 and data[1] == 0):
        return None
    try:
        return str(data, "utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def dumps(value) -> str:
    """`json.dumps(value, indent=2, ensure_ascii=False, default=str)`, the CLI's `--json` documents."""
    if _json is not None:
        parts: list[str] = []
        try:
            if _encode(value, parts, "\n"):
                return "".join(parts)
        except (ValueError, RecursionError):  # an int too long to print, a cycle: json says which
            pass
    import json

    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _encode(value, out: list[str], newline: str) -> bool:
    """Append `value`'s indented JSON to `out`; False at anything but JSON's own types (json handles those)."""
    kind = type(value)
    if kind is str:
        out.append(_json.encode_basestring(value))
    elif value is None or value is True or value is False:
        out.append("null" if value is None else "true" if value else "false")
    elif kind is int:
        out.append(int.__repr__(value))
    elif kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            return False
        out.append(float.__repr__(value))
    elif kind is dict or kind is list or kind is tuple:
        if not value:
            out.append("{}" if kind is dict else "[]")
            return True
        inner = newline + "  "
        out.append("{" if kind is dict else "[")
        separator = inner
        if kind is dict:
            for key, item in value.items():
                if type(key) is not str:
                    return False
                out.append(separator + _json.encode_basestring(key) + ": ")
                if not _encode(item, out, inner):
                    return False
                separator = "," + inner
        else:
            for item in value:
                out.append(separator)
                if not _encode(item, out, inner):
                    return False
                separator = "," + inner
        out.append(newline + ("}" if kind is dict else "]"))
    else:
        return False
    return True
