"""What the record rules take and give: `RecordOptions` (the rules for one model) and `RecordResult`.

Plain classes with slots rather than dataclasses: see `slots`.
"""

from __future__ import annotations

from synth_ai.datasets.images import DEFAULT_MAX_IMAGE_BYTES
from synth_ai.datasets.slots import Fields


class RecordOptions(Fields):
    """What a record is checked against. `vision` None means no model was named (no image gating/trimming);
    `max_images_per_message` None means no limit."""

    __slots__ = ("min_messages", "max_image_bytes", "model_id", "vision", "max_images_per_message", "normalize")

    def __init__(self, min_messages: int = 2, max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
                 model_id: str | None = None, vision: bool | None = None, max_images_per_message: int | None = None,
                 normalize: bool = False) -> None:
        self.min_messages = min_messages
        self.max_image_bytes = max_image_bytes
        self.model_id = model_id
        self.vision = vision
        self.max_images_per_message = max_images_per_message
        self.normalize = normalize


class RecordResult(Fields):
    """The problems, warnings and counters of one record (and, when asked, its normalised form)."""

    __slots__ = ("errors", "warnings", "record", "messages", "images", "images_dropped", "tool_calls",
                 "text_chars")

    def __init__(self, errors: list[str] | None = None, warnings: list[str] | None = None,
                 record: dict | None = None, messages: int = 0, images: int = 0, images_dropped: int = 0,
                 tool_calls: int = 0, text_chars: int = 0) -> None:
        self.errors = [] if errors is None else errors
        self.warnings = [] if warnings is None else warnings
        self.record = record
        self.messages = messages
        self.images = images
        self.images_dropped = images_dropped
        self.tool_calls = tool_calls
        self.text_chars = text_chars
