"""The fast path for valid records: a typed msgspec decode, then the few checks types cannot express.

Purely an accelerator. `fast_record` either vouches that a record is valid *and* has nothing to warn about,
returning its counters, or returns None; then `records.check_line` runs the full rules (`records._check_record`
on a `json.loads` of the line), which alone produces every error and warning message. So this module must accept
a subset of what the full rules accept, with the same counters: tests compare both on every corpus record.

The Structs mirror the common record shape only. Anything else (a content dict, a part without `type`, the flat
`name` form of a tool call, legacy image fields, ...) fails the typed decode and takes the full path, as do
records with errors or warnings. msgspec is a declared dependency; without it every record takes the full path.

An image data URL is checked without copying it out of the decode: its base64 is decoded from a view of the JSON
text by pybase64's SIMD decoder in strict mode (alphabet, padding; several GB/s), which also gives the exact decoded
size and the bytes whose header must name an allowed format. Without pybase64 (an optional speed-up), one
`bytes.translate` pass checks the alphabet instead.
"""

from __future__ import annotations

from binascii import a2b_base64
from typing import Any

import msgspec

try:
    from pybase64 import b64decode as _b64decode_simd
except ImportError:  # pragma: no cover - pybase64 is a declared dependency; this keeps the slower check
    _b64decode_simd = None

from synth_ai.datasets.images import B64_ALPHABET, MIME_FORMATS, parse_data_url_header
from synth_ai.datasets.records import ROLE_SET, RecordOptions


class _ImageURL(msgspec.Struct, gc=False):
    url: msgspec.Raw  # the JSON text, quotes included: no str is built for a megabyte of base64


class _TextPart(msgspec.Struct, tag="text", tag_field="type", gc=False):
    text: str


class _ImagePart(msgspec.Struct, tag="image_url", tag_field="type", gc=False):
    image_url: _ImageURL


class _Function(msgspec.Struct, gc=False):
    name: str
    arguments: Any = None


class _ToolCall(msgspec.Struct, gc=False):
    function: _Function


class _Message(msgspec.Struct, gc=False):
    role: str
    content: str | list[_TextPart | _ImagePart] | None = None
    tool_calls: list[_ToolCall] | None = None
    name: str | None = None
    reasoning: str | None = None
    raw_content: str | None = None


class _Tool(msgspec.Struct, gc=False):
    name: Any = None
    description: Any = None
    parameters: Any = None
    function: Any = None


class _Record(msgspec.Struct, gc=False):
    messages: list[_Message]
    tools: list[_Tool] | None = None
    metadata: dict[str, Any] | None = None
    images: Any = None
    image: Any = None
    image_url: Any = None


_decode = msgspec.json.Decoder(_Record).decode
# ValueError: invalid UTF-8; RecursionError: arrays or objects nested deeper than msgspec decodes (the full rules
# report that line instead of the scan crashing).
_DECODE_ERRORS = (msgspec.MsgspecError, ValueError, RecursionError)
# Tool-call arguments given as a JSON string must hold an object. msgspec accepts less than `json.loads` (no NaN,
# no lone surrogates), which is fine here: what it refuses goes to the full rules.
_decode_arguments = msgspec.json.Decoder(dict).decode

_PADDING = (b'"', b'="', b'=="')  # what a padded payload and the closing quote leave after `translate`
_MAGIC = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "jpeg": (b"\xff\xd8\xff",),
    "gif": (b"GIF87a", b"GIF89a"),
}
_headers: dict[bytes, tuple[str, bytes] | None] = {}  # b'"data:...,' -> (declared format, its residue)
_HEAD = 256  # a data URL header longer than this takes the full rules


def _header(prefix: bytes) -> tuple[str, bytes] | None:
    """For the opening `"data:<header>,` of a data URL: the format it declares when the full rules would accept
    it as-is, and what `translate(None, B64_ALPHABET)` leaves of it."""
    known = _headers.get(prefix, False)
    if known is False:
        mime, is_base64 = parse_data_url_header(prefix[1:-1].decode("latin-1"))
        fmt = MIME_FORMATS.get(mime[6:]) if is_base64 and mime.startswith("image/") else None
        known = (fmt, prefix.translate(None, B64_ALPHABET)) if fmt is not None else None
        if len(_headers) < 1024:
            _headers[prefix] = known
    return known


def _image_ok(raw: msgspec.Raw, max_bytes: int) -> bool:
    """Mirror of `images.check_image_url` on a URL's JSON text (quotes included) that only answers "valid, no
    warning". A data URL's payload must be strict base64 (no escapes, stray characters or inner `=`), at most
    `max_bytes` decoded, and start with the header of the format its media type declares."""
    view = memoryview(raw)
    head = bytes(view[:_HEAD])
    if not head.startswith(b'"data:'):
        text = bytes(view)
        if not text.startswith((b'"https://', b'"http://')) or text.find(b"\\") >= 0:
            return False  # not a string, another scheme, or escapes: let the full rules decide
        try:
            url = text[1:-1].decode("utf-8")
        except UnicodeDecodeError:
            return False
        return bool(url[url.index("://") + 3:].strip())
    comma = head.find(b",")
    if comma < 0:
        return False
    known = _header(head[:comma + 1])
    if known is None:
        return False
    fmt, leftovers = known
    size = len(view) - comma - 2  # less the header and the closing quote
    if size == 0 or size % 4 or size // 4 * 3 - 2 > max_bytes:
        return False
    if _b64decode_simd is not None:
        try:
            decoded = _b64decode_simd(view[comma + 1:-1], validate=True)
        except ValueError:  # binascii.Error: not strict base64
            return False
        if len(decoded) > max_bytes:
            return False
        start = decoded[:12]
    else:
        text = bytes(view)
        pad = 2 if text[-3:-1] == b"==" else 1 if text[-2] == 61 else 0
        if text.translate(None, B64_ALPHABET) != leftovers + _PADDING[pad] or size // 4 * 3 - pad > max_bytes:
            return False
        start = a2b_base64(text[comma + 1:comma + 17])
    if fmt == "webp":
        return start[:4] == b"RIFF" and start[8:12] == b"WEBP"
    return start.startswith(_MAGIC[fmt])


def fast_record(line: bytes | memoryview, opts: RecordOptions) -> tuple[int, int, int, int] | None:
    """(messages, images, tool_calls, text_chars) of a valid, warning-free record; None: use the full rules."""
    try:
        rec = _decode(line)
    except _DECODE_ERRORS:
        return None
    if rec.images is not None or rec.image is not None or rec.image_url is not None:
        return None
    messages = rec.messages
    if len(messages) < opts.min_messages:
        return None
    chars = images = calls = 0
    limit = opts.max_images_per_message
    max_bytes = opts.max_image_bytes
    assistant = False
    for m in messages:
        role = m.role
        if role not in ROLE_SET:
            return None
        if role == "assistant":
            assistant = True
        content = m.content
        if content.__class__ is str:
            chars += len(content)
        elif content is not None:
            here = 0
            for part in content:
                if part.__class__ is _TextPart:
                    chars += len(part.text)
                    continue
                if not _image_ok(part.image_url.url, max_bytes):
                    return None
                here += 1
            if here:
                if limit is not None and here > limit:
                    return None
                images += here
        tool_calls = m.tool_calls
        if tool_calls is not None:
            for call in tool_calls:
                fn = call.function
                name = fn.name
                if not name.strip():
                    return None
                chars += len(name)
                args = fn.arguments
                if args.__class__ is str:
                    chars += len(args)
                    if args.strip():
                        try:
                            _decode_arguments(args)
                        except _DECODE_ERRORS:
                            return None
                elif args is not None and args.__class__ is not dict:
                    return None
            calls += len(tool_calls)
        if m.reasoning:
            chars += len(m.reasoning)
    if not assistant or (images and opts.vision is False):
        return None
    tools = rec.tools
    if tools is not None:
        for tool in tools:
            spec = tool.function if tool.function.__class__ is dict else None
            if spec is None:
                name, description, parameters = tool.name, tool.description, tool.parameters
            else:
                name, description, parameters = spec.get("name"), spec.get("description"), spec.get("parameters")
            if name.__class__ is not str or not name.strip():
                return None
            if description is not None and description.__class__ is not str:
                return None
            if parameters is not None and parameters.__class__ is not dict:
                return None
    return len(messages), images, calls, chars
