"""Image parts inside messages: counting them and trimming them to a model's per-message limit (the same
functions the validator and the trainer use)."""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not loaded at run time (the `files validate` start-up: see record_types)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

IMAGE_PART_TYPES = ("image_url", "image")


def count_images(content: Any) -> int:
    """How many image parts a message's content holds (0 for string content)."""
    if not isinstance(content, list):
        return 0
    return sum(1 for part in content if isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES)


def trim_message_images(message: dict[str, Any], limit: int) -> tuple[dict[str, Any], int]:
    """Keep the first `limit` image parts of one message (text parts untouched); return it and the number dropped."""
    content = message.get("content")
    if not isinstance(content, list):
        return message, 0
    kept: list[Any] = []
    seen = dropped = 0
    for part in content:
        if isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES:
            seen += 1
            if seen > limit:
                dropped += 1
                continue
        kept.append(part)
    if not dropped:
        return message, 0
    return {**message, "content": kept}, dropped


def trim_images(messages: Sequence[dict[str, Any]], max_per_message: int) -> tuple[list[dict[str, Any]], int]:
    """Apply `trim_message_images` to every message: what the trainer does with a model's image limit.

    Returns new messages (inputs are not modified) and the total number of image parts dropped.
    """
    if max_per_message < 0:
        raise ValueError("max_per_message must be >= 0")
    out: list[dict[str, Any]] = []
    total = 0
    for message in messages:
        trimmed, dropped = trim_message_images(message, max_per_message)
        out.append(trimmed)
        total += dropped
    return out, total
