"""The result of validating an SFT JSONL file: issues with line numbers, a summary, and their renderings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

FIX_HINT = (
    'Each non-blank line must be one JSON object like {"messages": [{"role": "user", "content": "..."}, '
    '{"role": "assistant", "content": "..."}]}; images go in content parts '
    '{"type": "image_url", "image_url": {"url": "https://... or data:image/png;base64,..."}}. '
    "See docs/datasets.md, then re-run `synth-ai files validate PATH`."
)


@dataclass(frozen=True, slots=True)
class DatasetIssue:
    """One problem (or warning) in a dataset. `line` is 1-based, counting blank lines; None for the whole file."""

    line: int | None
    message: str

    def render(self) -> str:
        return f"Line {self.line}: {self.message}" if self.line is not None else self.message

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "message": self.message}


@dataclass(slots=True)
class DatasetSummary:
    lines: int = 0  # every line, blank ones included
    blank_lines: int = 0
    records: int = 0  # non-blank lines
    examples: int = 0  # records that passed every rule
    invalid_records: int = 0
    messages: int = 0  # turns in valid examples
    images: int = 0  # image parts in valid examples (before trimming)
    images_trimmed: int = 0  # beyond the model's max_images_per_message
    tool_calls: int = 0
    text_chars: int = 0
    approx_tokens: int = 0  # text characters / 4 (a heuristic; images not counted)
    bytes: int = 0  # bytes read (the whole file unless `limit` stopped early)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class DatasetReport:
    path: str
    ok: bool = True
    errors: list[DatasetIssue] = field(default_factory=list)  # the first `max_errors`
    error_count: int = 0
    warnings: list[DatasetIssue] = field(default_factory=list)  # the first `max_errors`
    warning_count: int = 0
    summary: DatasetSummary = field(default_factory=DatasetSummary)
    sha256: str | None = None  # of the whole file; None when `limit` stopped before its end
    model: str | None = None
    min_messages: int = 2
    max_errors: int = 20
    limit: int | None = None

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
