"""Image references inside SFT records: URL schemes, `data:` URLs, base64 and image headers.

Checks are byte-level and cheap: a base64 payload is checked for its alphabet and padding with one
`bytes.translate` pass, only its first 16 characters are decoded (enough for every supported image header), and
the decoded size is computed from its length. Nothing decoded is kept.
"""

from __future__ import annotations

import binascii

from synth_ai.datasets.slots import Fields

DEFAULT_MAX_IMAGE_BYTES = 10 * 1024 * 1024  # decoded bytes of one data-URL image

B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
REMOTE_SCHEMES = ("https://", "http://")
IMAGE_FORMATS = ("png", "jpeg", "gif", "webp")
MIME_FORMATS = {"png": "png", "jpeg": "jpeg", "jpg": "jpeg", "pjpeg": "jpeg", "gif": "gif", "webp": "webp"}


class ImageCheck(Fields):
    """What one image reference turned out to be. `error` set means the reference is unusable."""

    __slots__ = ("kind", "format", "size", "error", "warning")

    def __init__(self, kind: str, format: str | None = None, size: int = 0, error: str | None = None,
                 warning: str | None = None) -> None:
        self.kind = kind  # "remote" | "data" | "invalid"
        self.format = format  # sniffed from the bytes, for data URLs
        self.size = size  # decoded bytes, for data URLs
        self.error = error
        self.warning = warning


def sniff_image_format(head: bytes) -> str | None:
    """The image format named by a file's first bytes (12 are enough), or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if len(head) >= 12 and head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "webp"
    return None


def base64_problem(payload: bytes) -> str | None:
    """Why `payload` is not strict, padded base64 (RFC 4648 §4), or None when it is."""
    size = len(payload)
    if size == 0:
        return "the base64 payload is empty"
    stray = payload.translate(None, B64_ALPHABET + b"=")
    if stray:
        char = stray[:1]
        shown = repr(char.decode("latin-1")) if char.isascii() else f"byte 0x{char[0]:02x}"
        return f"invalid base64: character {shown} at offset {payload.index(char)}"
    pad = 2 if payload.endswith(b"==") else 1 if payload.endswith(b"=") else 0
    if payload.find(b"=", 0, size - pad) >= 0:
        return f"invalid base64: '=' padding inside the data at offset {payload.index(b'=')}"
    if size % 4:
        return f"invalid base64: length {size} is not a multiple of 4 (truncated or unpadded)"
    return None


def decoded_size(payload: bytes) -> int:
    pad = 2 if payload.endswith(b"==") else 1 if payload.endswith(b"=") else 0
    return len(payload) // 4 * 3 - pad


def parse_data_url_header(header: str) -> tuple[str, bool]:
    """`data:image/png;base64` → ("image/png", True). The header is the URL up to (not including) the comma."""
    media = header[5:]
    mime, _, params = media.partition(";")
    is_base64 = any(p.strip().lower() == "base64" for p in params.split(";")) if params else False
    return mime.strip().lower(), is_base64


def check_data_url(header: str, payload: bytes | None, *, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> ImageCheck:
    """Check a `data:` URL split at its first comma. `payload` None means it was not ASCII (so not base64)."""
    mime, is_base64 = parse_data_url_header(header)
    if not mime.startswith("image/"):
        shown = mime or "(none)"
        return ImageCheck("invalid", error=f"data URL has media type {shown}; only data:image/... URLs are images")
    if not is_base64:
        return ImageCheck("invalid", error=f"data URL for {mime} is not base64-encoded (expected ';base64,')")
    if payload is None:
        return ImageCheck("invalid", error="invalid base64: the payload has non-ASCII characters")
    problem = base64_problem(payload)
    if problem is not None:
        return ImageCheck("invalid", error=problem)
    size = decoded_size(payload)
    if size > max_bytes:
        return ImageCheck(
            "invalid", size=size,
            error=f"image is {_mib(size)} decoded, above the {_mib(max_bytes)} limit per image",
        )
    fmt = sniff_image_format(binascii.a2b_base64(payload[:16]))
    if fmt is None:
        return ImageCheck(
            "invalid", size=size,
            error=f"data URL declares {mime} but its bytes are not a PNG, JPEG, GIF or WEBP image",
        )
    declared = MIME_FORMATS.get(mime[6:])
    warning = None
    if declared != fmt:
        warning = f"data URL declares {mime} but the bytes are {fmt.upper()}"
    return ImageCheck("data", format=fmt, size=size, warning=warning)


def check_image_url(url: object, *, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> ImageCheck:
    """Check one image reference (a URL string from a record; anything else is an error)."""
    if not isinstance(url, str) or not url.strip():
        return ImageCheck("invalid", error="image_url has an empty or missing url")
    if url.startswith("data:"):
        header, comma, rest = url.partition(",")
        if not comma:
            return ImageCheck("invalid", error="data URL has no ',' before its payload")
        try:
            payload: bytes | None = rest.encode("ascii")
        except UnicodeEncodeError:
            payload = None
        return check_data_url(header, payload, max_bytes=max_bytes)
    lowered = url[:8].lower()
    if lowered.startswith(REMOTE_SCHEMES):
        if not url[url.index("://") + 3:].strip():
            return ImageCheck("invalid", error=f"image url {url!r} has no host")
        return ImageCheck("remote")
    shown = url if len(url) <= 40 else url[:37] + "..."
    return ImageCheck(
        "invalid",
        error=f"image url {shown!r} is not https://, http:// or a data:image/...;base64 URL",
    )


def _mib(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 2**20:
        return f"{size / 1024:.1f} KiB"
    return f"{size / 2**20:.1f} MiB"
