"""OpenAI multimodal user messages from images, as the policy config asks for.

Policy knobs (from `policy.config`): `use_vision` (send images at all), `image_only_mode` (send the image without
the text observation), `max_images_per_message` (keep the most recent N). Images are PNG data URLs
(`data:image/png;base64,…`) in `{"type": "image_url", "image_url": {"url": …}}` parts.

`image_to_png_bytes` accepts PNG bytes, a PIL image, or a uint8 array (H×W, H×W×3, H×W×4; numpy or nested lists);
arrays are encoded with the standard library (zlib), so no imaging package is needed.
"""

from __future__ import annotations

import base64
import io
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DATA_URL_PREFIX = "data:image/png;base64,"


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "t", "yes", "y", "on"}
    return bool(value)


@dataclass(frozen=True)
class VisionSettings:
    use_vision: bool = False
    image_only_mode: bool = False
    max_images_per_message: int = 1

    @classmethod
    def from_policy_config(cls, config: Mapping[str, Any] | None) -> VisionSettings:
        config = config or {}
        image_only = _truthy(config.get("image_only_mode", False))
        # image_only_mode implies sending images.
        use_vision = _truthy(config.get("use_vision", False)) or image_only
        raw_max = config.get("max_images_per_message", 1)
        try:
            max_images = int(raw_max) if raw_max is not None else 1
        except (TypeError, ValueError):
            raise ValueError(f"policy.config.max_images_per_message must be an integer, not {raw_max!r}") from None
        if max_images < 1:
            raise ValueError(f"policy.config.max_images_per_message must be at least 1, not {max_images}")
        return cls(use_vision, image_only, max_images)


def png_data_url(png: bytes) -> str:
    if not png.startswith(PNG_SIGNATURE):
        raise ValueError("png_data_url expects PNG bytes (they must start with the PNG signature)")
    return DATA_URL_PREFIX + base64.b64encode(png).decode("ascii")


def image_to_png_bytes(image: Any) -> bytes:
    """PNG bytes for PNG bytes, a PIL image, or a uint8 pixel array."""
    if isinstance(image, (bytes, bytearray)):
        data = bytes(image)
        if not data.startswith(PNG_SIGNATURE):
            raise ValueError("image bytes are not a PNG")
        return data
    if hasattr(image, "save") and hasattr(image, "mode"):  # PIL.Image.Image
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return buffer.getvalue()
    return _encode_png(image)


def _encode_png(pixels: Any) -> bytes:
    if hasattr(pixels, "dtype") and hasattr(pixels, "shape"):
        return _encode_array(pixels)
    rows = pixels
    if not isinstance(rows, Sequence) or not rows or not isinstance(rows[0], Sequence) or not rows[0]:
        raise ValueError("an image array must be H×W, H×W×3 or H×W×4 with H, W ≥ 1")
    height, width = len(rows), len(rows[0])
    first = rows[0][0]
    channels = len(first) if isinstance(first, Sequence) else 1
    color_type = {1: 0, 3: 2, 4: 6}.get(channels)
    if color_type is None:
        raise ValueError(f"an image array must have 1, 3 or 4 channels, not {channels}")
    raw = bytearray()
    for row in rows:
        if len(row) != width:
            raise ValueError("every image row must have the same width")
        raw.append(0)  # filter: none
        for px in row:
            values = px if channels > 1 else (px,)
            for v in values:
                iv = int(v)
                if not 0 <= iv <= 255:
                    raise ValueError("image pixel values must be uint8 (0..255)")
                raw.append(iv)

    return _png(width, height, color_type, bytes(raw))


def _encode_array(array: Any) -> bytes:
    """numpy fast path: rows prefixed with the 'none' filter byte, no per-pixel Python loop."""
    import numpy as np

    if array.dtype != np.uint8:
        if array.size and (array.min() < 0 or array.max() > 255):
            raise ValueError("image pixel values must be uint8 (0..255)")
        array = array.astype(np.uint8)
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError("an image array must be H×W, H×W×3 or H×W×4 with H, W ≥ 1")
    height, width, channels = array.shape
    color_type = {1: 0, 3: 2, 4: 6}.get(channels)
    if color_type is None:
        raise ValueError(f"an image array must have 1, 3 or 4 channels, not {channels}")
    flat = np.ascontiguousarray(array).reshape(height, width * channels)
    raw = np.hstack([np.zeros((height, 1), dtype=np.uint8), flat]).tobytes()
    return _png(width, height, color_type, raw)


def _png(width: int, height: int, color_type: int, raw: bytes) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def image_part(image: Any) -> dict[str, Any]:
    url = image if isinstance(image, str) and image.startswith("data:image/") else \
        png_data_url(image_to_png_bytes(image))
    return {"type": "image_url", "image_url": {"url": url}}


def build_user_message(text: str, images: Iterable[Any] = (), settings: VisionSettings | None = None,
                       ) -> dict[str, Any]:
    """A `{"role": "user", "content": …}` message. Without vision (or without images) the content is the text;
    with vision it is a list of parts: the text (left out in image-only mode) and the last
    `max_images_per_message` images. Image-only mode with no image falls back to the text."""
    settings = settings or VisionSettings()
    chosen = list(images)[-settings.max_images_per_message:] if settings.use_vision else []
    if not chosen:
        return {"role": "user", "content": text}
    parts: list[dict[str, Any]] = []
    if not settings.image_only_mode:
        parts.append({"type": "text", "text": text})
    parts.extend(image_part(image) for image in chosen)
    return {"role": "user", "content": parts}
