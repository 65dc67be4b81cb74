"""What every record rule shares: the options a record is checked against, the result the rules fill in, the
context passed between them, and how a found value is named in a message."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from synth_ai.datasets.images import DEFAULT_MAX_IMAGE_BYTES


@dataclass(slots=True)
class RecordOptions:
    """What a record is checked against. `vision` None means no model was named (no image gating/trimming)."""

    min_messages: int = 2
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    model_id: str | None = None
    vision: bool | None = None
    max_images_per_message: int | None = None  # None: no limit
    normalize: bool = False


@dataclass(slots=True)
class RecordResult:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    record: dict[str, Any] | None = None
    messages: int = 0
    images: int = 0
    images_dropped: int = 0
    tool_calls: int = 0
    text_chars: int = 0


class RuleContext:
    """One record being checked: its options, the result being filled in, and whether to normalise."""

    __slots__ = ("opts", "res", "normalize")

    def __init__(self, opts: RecordOptions) -> None:
        self.opts = opts
        self.res = RecordResult()
        self.normalize = opts.normalize

    def error(self, text: str) -> None:
        self.res.errors.append(text)


def type_name(value: Any) -> str:
    """The JSON name of a value's type, as error messages say it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def show_value(value: Any) -> str:
    """A short JSON rendering of a scalar (its type name otherwise), for quoting a wrong value."""
    text = json.dumps(value) if isinstance(value, (str, int, float, bool)) else type_name(value)
    return text if len(text) <= 40 else text[:37] + "..."
