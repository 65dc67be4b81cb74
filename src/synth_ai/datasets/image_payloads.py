"""Check the image payloads of a JSONL line once, then cut them short, so the record rules parse kilobytes.

A screenshot dataset is almost all base64. Parsing it (json or msgspec) scans every character of every image, and
the image check scans them again. Here each `"url": "data:<header>,<payload>"` is found with `bytes.find` (memchr
speed), its payload checked by pybase64's strict SIMD decoder (alphabet, padding, decoded size), and when it
passes it is replaced by its first 16 characters. The record rules then see a short line whose verdicts and
counters are those of the original line:

- the payload is inside the url's string: what precedes it (`{"url": "` or `, "url": "`) can only be a key and
  its value's opening quote on any line that parses at all, and the payload holds no `"` or `\\`, so the string
  ends right after it (and its header, also free of `"` and `\\`, reads as written, first comma included);
- the first 16 characters of a strict payload are strict base64 themselves, decode to the same 12 header bytes
  (the format the rules sniff, with the same media-type warning) and to fewer bytes (the size limit still holds).

A payload that fails a check stays in place, for the rules to report in their own words. Callers check the
original line again whenever the short one has an error or a warning (a JSON error's column would be off).
Every image is still decoded in full; the decoder takes it in 128 KiB pieces, so no image-sized buffer is
allocated and freed per image (fresh pages cost more than the decoding), and it releases the GIL meanwhile.
"""

from __future__ import annotations

try:
    from pybase64 import b64decode as _b64decode
except ImportError:  # pragma: no cover - pybase64 is a declared dependency; without it lines stay whole
    _b64decode = None

_KEEP = 16  # characters of a payload kept: 12 decoded bytes, every supported image header
_PIECE = 1 << 17  # characters decoded per call (a multiple of 4)
_HEADER_MAX = 256  # a longer `data:` header is left to the rules
# What may precede `"data:` for it to open the value of a "url" key (as json.dumps, msgspec and compact writers
# put it).
_URL_KEYS = (b'{"url": ', b'{"url":', b', "url": ', b',"url":', b', "url":', b',"url": ')
_KEY_SPAN = 9  # the longest of _URL_KEYS


def payload_ok(buf: bytes, start: int, end: int, max_bytes: int) -> bool:
    """Is `buf[start:end]` strict, padded base64 of at most `max_bytes` decoded bytes? Decodes all of it."""
    size = end - start
    if size == 0 or size % 4 or size // 4 * 3 - 2 > max_bytes or _b64decode is None:
        return False
    view = memoryview(buf)
    decoded = 0
    try:
        for at in range(start, end, _PIECE):
            stop = min(at + _PIECE, end)
            if stop < end and buf[stop - 1] == 61:  # "=" ends a piece: padding inside the payload
                return False
            decoded += len(_b64decode(view[at:stop], validate=True))
    except ValueError:  # binascii.Error: a character outside the alphabet, or misplaced padding
        return False
    return decoded <= max_bytes


def shorten(buf: bytes, start: int, end: int, max_bytes: int) -> bytes | None:
    """`buf[start:end]` (one line) with each checked data-URL payload cut to its first 16 characters, or None
    when no payload was cut (the line is used as it is)."""
    find = buf.find
    pieces: list[bytes] = []
    pos = start
    at = find(b'"data:', start, end)
    while at >= 0:
        comma = find(b",", at + 6, min(at + _HEADER_MAX, end))
        if comma < 0:
            break
        close = find(b'"', comma + 1, end)
        if close < 0:
            break
        if (close - comma > _KEEP + 1
                and buf[max(start, at - _KEY_SPAN):at].endswith(_URL_KEYS)
                and find(b'"', at + 1, comma) < 0 and find(b"\\", at + 1, comma) < 0
                and payload_ok(buf, comma + 1, close, max_bytes)):
            pieces.append(buf[pos:comma + 1 + _KEEP])
            pos = close
        at = find(b'"data:', close + 1, end)
    if not pieces:
        return None
    pieces.append(buf[pos:end])
    return b"".join(pieces)
