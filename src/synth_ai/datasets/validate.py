"""The public dataset API: validate a JSONL file, stream its normalised records, take its first N records.

Used by the client (`synth-ai files validate`, `synth-ai train`) and by the embedded backend (validation of
uploads, the SFT trainer reading records), so both sides apply the same rules with the same messages.
"""

from __future__ import annotations

import os
import sys

from synth_ai.datasets.images import DEFAULT_MAX_IMAGE_BYTES
from synth_ai.datasets.reader import LineReader, is_blank
from synth_ai.datasets.records import RecordOptions, check_line
from synth_ai.datasets.report import FIX_HINT, DatasetIssue, DatasetReport
from synth_ai.datasets.scan import scan_lines

TYPE_CHECKING = False  # `typing` and the errors' dataclasses stay unloaded at run time until needed (see `slots`)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from synth_ai.errors import InvalidInputError, NotFoundError

DEFAULT_MIN_MESSAGES = 2
DEFAULT_MAX_ERRORS = 20

PathLike = str | os.PathLike[str]


def _invalid(message: str, **kwargs: Any) -> InvalidInputError:
    from synth_ai.errors import InvalidInputError

    return InvalidInputError(message, **kwargs)


def _not_found(message: str, **kwargs: Any) -> NotFoundError:
    from synth_ai.errors import NotFoundError

    return NotFoundError(message, **kwargs)


def path_text(path: PathLike) -> str:
    """`str(pathlib.Path(path))`: how reports name the file. Written out on POSIX because importing pathlib
    is a few ms of every `files validate` start (a test holds it to pathlib's result)."""
    if os.name != "posix":
        from pathlib import Path

        return str(Path(path))
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"expected str or os.PathLike[str], not {type(text).__name__}")
    root = "//" if text.startswith("//") and not text.startswith("///") else "/" if text.startswith("/") else ""
    return root + "/".join(part for part in text.split("/") if part and part != ".") or "."


def _open_check(path: PathLike) -> str:
    """The path as reports name it, once it is known to be a readable file."""
    p = path_text(path)
    if not os.path.exists(p):
        raise _not_found(
            f"Dataset not found: {p}",
            hint="Check the path (relative paths are from the current directory), then run "
            f"`synth-ai files validate {p}`.",
        )
    if os.path.isdir(p):
        raise _invalid(f"Dataset path is a directory, not a JSONL file: {p}", hint="Pass the .jsonl file itself.")
    if not os.access(p, os.R_OK):
        raise _invalid(f"Dataset is not readable: {p}", hint="Check the file's permissions.")
    return p


def record_options(
    *,
    model: str | None = None,
    min_messages: int = DEFAULT_MIN_MESSAGES,
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    max_images_per_message: int | None = None,
    normalize: bool = False,
) -> RecordOptions:
    """The rules for one model: images only for vision models, at most `max_images_per_message` kept per message
    (the registry's value unless overridden). `model` None: no image gating or trimming."""
    if min_messages < 1:
        raise _invalid(f"min_messages must be at least 1 (got {min_messages}).")
    if max_image_bytes < 1:
        raise _invalid(f"max_image_bytes must be positive (got {max_image_bytes}).")
    if max_images_per_message is not None and max_images_per_message < 0:
        raise _invalid(f"max_images_per_message must be >= 0 (got {max_images_per_message}).")
    opts = RecordOptions(min_messages=min_messages, max_image_bytes=max_image_bytes, normalize=normalize)
    if model:
        from synth_ai.models.registry import resolve_model

        resolved = resolve_model(model)
        opts.model_id = resolved.canonical
        opts.vision = resolved.base.supports_vision
        if opts.vision:
            opts.max_images_per_message = (
                max_images_per_message if max_images_per_message is not None
                else resolved.base.max_images_per_message or None
            )
    elif max_images_per_message is not None:
        opts.max_images_per_message = max_images_per_message
        opts.model_id = "the model"
    return opts


def validate_jsonl(
    path: PathLike,
    *,
    model: str | None = None,
    min_messages: int = DEFAULT_MIN_MESSAGES,
    max_errors: int = DEFAULT_MAX_ERRORS,
    limit: int | None = None,
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    max_images_per_message: int | None = None,
    sha256: bool = True,
    workers: int = 1,
    fast: bool = True,
) -> DatasetReport:
    """Check every record of an SFT JSONL file in one streaming pass (constant memory) and report.

    `limit` checks only the first N non-blank records (then `sha256` is None unless the file ended first).
    The first `max_errors` errors (and warnings) are listed with their line numbers; all are counted.
    `sha256=True` hashes the file in the same pass. `workers` > 1 splits a large file across that many processes
    (forked; Linux only, else one), 0 picks one per idle CPU (16 MiB per process at least); the report is
    identical either way.
    Raises `NotFoundError` for a missing file and `InvalidInputError` for an unknown model or bad options;
    a bad dataset is not an exception: look at `report.ok` (or call `ensure_valid`).
    """
    p = _open_check(path)
    if max_errors < 0:
        raise _invalid(f"max_errors must be >= 0 (got {max_errors}).")
    if limit is not None and limit <= 0:
        raise _invalid(f"Example limit must be positive (got {limit}).")
    if workers < 0:
        raise _invalid(f"workers must be >= 0 (got {workers}).")
    opts = record_options(model=model, min_messages=min_messages, max_image_bytes=max_image_bytes,
                          max_images_per_message=max_images_per_message)
    report = DatasetReport(path=p, model=opts.model_id if model else None, min_messages=min_messages,
                           max_errors=max_errors, limit=limit)
    s = report.summary
    procs = 1 if limit is not None else _worker_count(workers, os.path.getsize(p))
    if procs > 1:
        from synth_ai.datasets.parallel import scan_parallel

        scan_parallel(p, opts, report, procs, fast=fast, sha256=sha256)
    else:
        reader = LineReader(p, hash=sha256)
        consumed = scan_lines(reader, opts, report, limit=limit, fast=fast)
        s.bytes = reader.bytes_read if reader.complete else consumed
        report.sha256 = reader.sha256
    if s.records == 0:
        report.error_count += 1
        if len(report.errors) < max_errors:
            report.errors.append(DatasetIssue(None, "File contains no SFT examples (every line is blank)"
                                              if s.lines else "File contains no SFT examples (the file is empty)"))
    s.approx_tokens = (s.text_chars + 3) // 4
    report.ok = report.error_count == 0
    return report


# Below this per process a second one saves less than forking costs (about 2 ms with the COW faults after it).
_MIN_BYTES_PER_WORKER = 16 << 20


def _worker_count(workers: int, size: int) -> int:
    """Processes to use: `workers` as asked; 0 = one per idle CPU (at most 8), for files of 16 MiB per process.

    A CPU counts as idle by the 1-minute load average: on a machine whose cores are all busy a second process only
    adds its fork to the wall time (measured on the 2-core bench machine under other work; bench/README.md).
    """
    if workers == 1 or sys.platform != "linux":  # parallel scans fork; elsewhere fork is unsafe or missing
        return 1
    if workers == 0:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        idle = cpus - int(os.getloadavg()[0])  # CPUs a whole process's worth of load does not occupy
        return max(1, min(idle, 8, size // _MIN_BYTES_PER_WORKER))
    return workers


def ensure_valid(path: PathLike, **kwargs: Any) -> DatasetReport:
    """`validate_jsonl`, raising `InvalidInputError` (rendered report as message, report as details) if invalid."""
    report = validate_jsonl(path, **kwargs)
    if not report.ok:
        raise _invalid(report.render(), hint=FIX_HINT, details=report.to_dict())
    return report


def iter_normalized_records(
    path: PathLike,
    *,
    model: str | None = None,
    limit: int | None = None,
    min_messages: int = DEFAULT_MIN_MESSAGES,
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    max_images_per_message: int | None = None,
    on_error: str = "raise",
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(line_no, record)` for each record, normalised (see `synth_ai.datasets.records`).

    Streams in constant memory. Images beyond the model's per-message limit are trimmed. An invalid record raises
    `InvalidInputError` naming the file and line (`on_error="raise"`) or is skipped (`on_error="skip"`).
    """
    if on_error not in {"raise", "skip"}:
        raise ValueError("on_error must be 'raise' or 'skip'")
    p = _open_check(path)
    opts = record_options(model=model, min_messages=min_messages, max_image_bytes=max_image_bytes,
                          max_images_per_message=max_images_per_message, normalize=True)
    seen = 0
    for line_no, raw in LineReader(p, hash=False):
        if is_blank(raw):
            continue
        if limit is not None and seen >= limit:
            return
        seen += 1
        res = check_line(raw, opts)
        if res.errors or res.record is None:
            if on_error == "skip":
                continue
            more = f" (and {len(res.errors) - 1} more on that line)" if len(res.errors) > 1 else ""
            raise _invalid(f"{p}: Line {line_no}: {res.errors[0]}{more}", hint=FIX_HINT,
                           details={"path": p, "line": line_no, "errors": res.errors})
        yield line_no, res.record


def first_n_records(path: PathLike, n: int, dest: PathLike) -> int:
    """Write the first `n` non-blank lines of `path` to `dest` (for `train --examples N`); return how many.

    Lines are copied byte for byte (each ends with a newline). `dest` appears complete or not at all.
    """
    if n <= 0:
        raise _invalid(f"Example limit must be positive (got {n}).", hint="Pass --examples 1 or more.")
    p = _open_check(path)
    from synth_ai.fsutil import AtomicFile

    written = 0
    # a scratch copy for one upload: private (0600) and not fsynced, as it always was
    with AtomicFile(dest, mode=0o600, durable=False) as out:
        for _, raw in LineReader(p, hash=False):
            if is_blank(raw):
                continue
            out.write(raw)
            out.write(b"\n")
            written += 1
            if written >= n:
                break
        out.commit()
    return written
