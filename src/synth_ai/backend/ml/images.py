"""Turn OpenAI-style image references into RGB Pillow images.

`data:image/...;base64,...` URLs are decoded in memory. Remote `http(s)://` URLs are fetched only when the caller
allows it (inference: `SYNTH_INFERENCE_ALLOW_REMOTE_IMAGES=1`; training: `SYNTH_TRAINING_ALLOW_REMOTE_IMAGES=1`),
with a timeout and a size cap; anything else is refused with a clear error.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
from typing import Any

from synth_ai.errors import InvalidInputError

MAX_IMAGE_BYTES = 20 * 1024 * 1024
REMOTE_TIMEOUT_S = 15.0


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def image_url_of(part: Any) -> str | None:
    """The URL of an image content part, or None when the part is not an image.

    Accepts `{"type": "image_url", "image_url": {"url": ...}}`, `{"type": "image_url", "image_url": "..."}` and
    `{"type": "image", "image": "..."}` (also `"url"` inside an `image` part).
    """
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind == "image_url" or (kind is None and "image_url" in part):
        ref = part.get("image_url")
        if isinstance(ref, dict):
            ref = ref.get("url")
        return ref if isinstance(ref, str) else ""
    if kind == "image" or (kind is None and "image" in part):
        ref = part.get("image", part.get("url"))
        if isinstance(ref, dict):
            ref = ref.get("url")
        return ref if isinstance(ref, str) else ""
    return None


def load_image(url: str, *, allow_remote: bool, where: str = "image", max_pixels: int | None = None) -> Any:
    """Decode or fetch one image; returns a `PIL.Image.Image` in RGB mode. With `max_pixels`, an image declaring
    more pixels is refused before it is decoded (a small, well-compressed file can decode to gigabytes)."""
    from PIL import Image, UnidentifiedImageError

    url = (url or "").strip()
    if not url:
        raise InvalidInputError(f"{where}: the image URL is empty.")
    if url.startswith("data:"):
        header, sep, payload = url.partition(",")
        if not sep:
            raise InvalidInputError(f"{where}: malformed data URL (no ',' before the payload).")
        if ";base64" not in header:
            raise InvalidInputError(f"{where}: only base64 data URLs are supported (found '{header[:40]}').")
        try:
            raw = base64.b64decode(payload, validate=False)
        except (binascii.Error, ValueError) as exc:
            raise InvalidInputError(f"{where}: the data URL is not valid base64 ({exc}).") from exc
    elif url.startswith(("http://", "https://")):
        if not allow_remote:
            raise InvalidInputError(
                f"{where}: remote image URLs are refused by this backend ({url[:80]}).",
                hint="Send the image inline as a data:image/...;base64 URL, or start the backend with "
                "SYNTH_INFERENCE_ALLOW_REMOTE_IMAGES=1 (inference) / SYNTH_TRAINING_ALLOW_REMOTE_IMAGES=1 "
                "(training) to allow fetching.",
            )
        raw = _fetch(url, where)
    else:
        raise InvalidInputError(
            f"{where}: unsupported image reference '{url[:60]}'.",
            hint="Use a data:image/...;base64 URL (or an http(s) URL where remote images are enabled).",
        )
    if len(raw) > MAX_IMAGE_BYTES:
        raise InvalidInputError(f"{where}: the image is {len(raw)} bytes; the limit is {MAX_IMAGE_BYTES}.")
    try:
        image = Image.open(io.BytesIO(raw))
        width, height = image.size
        if max_pixels is not None and width * height > max_pixels:
            raise InvalidInputError(f"{where}: the image is {width}x{height} = {width * height} pixels; at most "
                                    f"{max_pixels} more pixels are accepted in this request.",
                                    hint="Downscale the image(s) before sending them.")
        image.load()
    except (UnidentifiedImageError, OSError) as exc:
        raise InvalidInputError(f"{where}: the image could not be decoded ({exc}).") from exc
    except Image.DecompressionBombError as exc:  # huge declared size: a request problem, not a server error
        raise InvalidInputError(f"{where}: the image is too large to decode ({exc}).") from exc
    return image.convert("RGB")


def _fetch(url: str, where: str) -> bytes:
    import httpx

    try:
        with httpx.stream("GET", url, timeout=REMOTE_TIMEOUT_S, follow_redirects=True) as response:
            response.raise_for_status()
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_IMAGE_BYTES:
                    raise InvalidInputError(f"{where}: the remote image exceeds {MAX_IMAGE_BYTES} bytes.")
                chunks.append(chunk)
            return b"".join(chunks)
    except httpx.HTTPError as exc:
        raise InvalidInputError(f"{where}: could not fetch {url[:80]} ({exc}).") from exc


def png_data_url(image: Any) -> str:
    """Encode a Pillow image as a PNG data URL (used by the tiny-model builder and tests)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
