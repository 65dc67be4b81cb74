"""SFT datasets: the one streaming validator and normaliser, shared by the client and the embedded backend.

    from synth_ai.datasets import validate_jsonl, iter_normalized_records

    report = validate_jsonl("train.jsonl", model="Qwen/Qwen3-VL-4B-Instruct")
    if not report.ok:
        print(report.render())
    for line_no, record in iter_normalized_records("train.jsonl", model=...):
        ...  # OpenAI-style messages, images as URLs / data URLs, tool_calls with dict arguments

Rules and formats: docs/datasets.md. Light imports only (standard library and the model registry).
"""

# Names load from their modules on first use (PEP 562): `synth-ai files validate` imports only what it runs.
_HOMES = {
    "synth_ai.datasets.images": ("DEFAULT_MAX_IMAGE_BYTES", "ImageCheck", "check_image_url", "sniff_image_format"),
    "synth_ai.datasets.records": ("ROLES", "RecordOptions", "RecordResult", "check_line", "check_record",
                                  "trim_images", "trim_message_images"),
    "synth_ai.datasets.report": ("FIX_HINT", "DatasetIssue", "DatasetReport", "DatasetSummary"),
    "synth_ai.datasets.validate": ("DEFAULT_MAX_ERRORS", "DEFAULT_MIN_MESSAGES", "ensure_valid", "first_n_records",
                                   "iter_normalized_records", "record_options", "validate_jsonl"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str):
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


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
