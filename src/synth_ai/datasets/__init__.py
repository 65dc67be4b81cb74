"""SFT datasets: the one streaming validator and normaliser, shared by the client and the embedded backend.

    from synth_ai.datasets import validate_jsonl, iter_normalized_records

    report = validate_jsonl("train.jsonl", model="Qwen/Qwen3-VL-4B-Instruct")
    if not report.ok:
        print(report.render())
    for line_no, record in iter_normalized_records("train.jsonl", model=...):
        ...  # OpenAI-style messages, images as URLs / data URLs, tool_calls with dict arguments

Rules and formats: docs/datasets.md. Light imports only (standard library and the model registry).
"""

from synth_ai.datasets.images import DEFAULT_MAX_IMAGE_BYTES, ImageCheck, check_image_url, sniff_image_format
from synth_ai.datasets.records import (
    ROLES,
    RecordOptions,
    RecordResult,
    check_line,
    check_record,
    trim_images,
    trim_message_images,
)
from synth_ai.datasets.report import FIX_HINT, DatasetIssue, DatasetReport, DatasetSummary
from synth_ai.datasets.validate import (
    DEFAULT_MAX_ERRORS,
    DEFAULT_MIN_MESSAGES,
    ensure_valid,
    first_n_records,
    iter_normalized_records,
    record_options,
    validate_jsonl,
)

__all__ = [
    "DEFAULT_MAX_ERRORS",
    "DEFAULT_MAX_IMAGE_BYTES",
    "DEFAULT_MIN_MESSAGES",
    "FIX_HINT",
    "ROLES",
    "DatasetIssue",
    "DatasetReport",
    "DatasetSummary",
    "ImageCheck",
    "RecordOptions",
    "RecordResult",
    "check_image_url",
    "check_line",
    "check_record",
    "ensure_valid",
    "first_n_records",
    "iter_normalized_records",
    "record_options",
    "sniff_image_format",
    "trim_images",
    "trim_message_images",
    "validate_jsonl",
]
