"""The result of validating an SFT JSONL file: issues with line numbers, a summary, and their renderings."""

from __future__ import annotations

from synth_ai.datasets.slots import Fields

TYPE_CHECKING = False  # `typing` is not loaded at run time: see slots
if TYPE_CHECKING:
    from typing import Any

FIX_HINT = (
    'Each non-blank line must be one JSON object like {"messages": [{"role": "user", "content": "..."}, '
    '{"role": "assistant", "content": "..."}]}; images go in content parts '
    '{"type": "image_url", "image_url": {"url": "https://... or data:image/png;base64,..."}}. '
    "See docs/datasets.md, then re-run `synth-ai files validate PATH`."
)


class DatasetIssue(Fields):
    """One problem (or warning) in a dataset. `line` is 1-based, counting blank lines; None for the whole file."""

    __slots__ = ("line", "message")

    def __init__(self, line: int | None, message: str) -> None:
        self.line = line
        self.message = message

    def render(self) -> str:
        return f"Line {self.line}: {self.message}" if self.line is not None else self.message


class DatasetSummary(Fields):
    """Counts over the file; `to_dict()` gives them all by name."""

    __slots__ = ("lines", "blank_lines", "records", "examples", "invalid_records", "messages", "images",
                 "images_trimmed", "tool_calls", "text_chars", "approx_tokens", "bytes")

    def __init__(self) -> None:
        self.lines = 0  # every line, blank ones included
        self.blank_lines = 0
        self.records = 0  # non-blank lines
        self.examples = 0  # records that passed every rule
        self.invalid_records = 0
        self.messages = 0  # turns in valid examples
        self.images = 0  # image parts in valid examples (before trimming)
        self.images_trimmed = 0  # beyond the model's max_images_per_message
        self.tool_calls = 0
        self.text_chars = 0
        self.approx_tokens = 0  # text characters / 4 (a heuristic; images not counted)
        self.bytes = 0  # bytes read (the whole file unless `limit` stopped early)


class DatasetReport(Fields):
    __slots__ = ("path", "ok", "errors", "error_count", "warnings", "warning_count", "summary", "sha256", "model",
                 "min_messages", "max_errors", "limit")

    def __init__(self, path: str, *, model: str | None = None, min_messages: int = 2, max_errors: int = 20,
                 limit: int | None = None) -> None:
        self.path = path
        self.ok = True
        self.errors: list[DatasetIssue] = []  # the first `max_errors`
        self.error_count = 0
        self.warnings: list[DatasetIssue] = []  # the first `max_errors`
        self.warning_count = 0
        self.summary = DatasetSummary()
        self.sha256: str | None = None  # of the whole file; None when `limit` stopped before its end
        self.model = model
        self.min_messages = min_messages
        self.max_errors = max_errors
        self.limit = limit

    @property
    def errors_omitted(self) -> int:
        return self.error_count - len(self.errors)

    @property
    def warnings_omitted(self) -> int:
        return self.warning_count - len(self.warnings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "ok": self.ok,
            "error_count": self.error_count,
            "errors": [e.to_dict() for e in self.errors],
            "errors_omitted": self.errors_omitted,
            "warning_count": self.warning_count,
            "warnings": [w.to_dict() for w in self.warnings],
            "warnings_omitted": self.warnings_omitted,
            "summary": self.summary.to_dict(),
            "sha256": self.sha256,
            "model": self.model,
            "min_messages": self.min_messages,
            "limit": self.limit,
        }

    def summary_line(self) -> str:
        s = self.summary
        parts = [
            f"{s.examples:,} examples",
            f"{s.messages:,} turns",
            f"{s.images:,} images" + (f" ({s.images_trimmed:,} trimmed)" if s.images_trimmed else ""),
            f"{s.tool_calls:,} tool calls",
            f"~{s.approx_tokens:,} text tokens (chars/4)",
            _size(s.bytes),
        ]
        return ", ".join(parts)

    def render(self) -> str:
        """Plain text: a headline, the listed issues with their line numbers, and how many more there are."""
        if self.ok:
            head = f"{self.path}: valid SFT dataset: {self.summary_line()}"
        else:
            shown = len(self.errors)
            count = self.error_count
            noun = "problem" if count == 1 else "problems"
            extent = f" (showing first {shown} of {count:,} {noun})" if shown < count else f" ({count:,} {noun})"
            bad = self.summary.invalid_records
            where = f" in {bad:,} of {self.summary.records:,} records" if self.summary.records else ""
            head = f"{self.path}: Dataset validation failed{where}{extent}:"
        lines = [head]
        lines.extend(f" - {e.render()}" for e in self.errors)
        if self.errors_omitted:
            lines.append(f" ... and {self.errors_omitted:,} more")
        return "\n".join(lines)


def _size(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:,} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000  # type: ignore[assignment]
    return f"{size} B"
