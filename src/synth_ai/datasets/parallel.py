"""Validate a large JSONL file with several processes: one byte range of whole lines each, then merge.

Records are independent, so a file cut at line boundaries (`reader.split_ranges`) can be checked in parts by
forked worker processes (this process takes the first range), each in constant memory. The merged report is
identical to a single-process pass: line numbers are shifted by the lines of the ranges before, the first
`max_errors` issues are kept in file order (each worker keeps its own first `max_errors`, so the global first ones
are among them), and counts add up. When asked, this process hashes the whole file (sha256) on a thread meanwhile.

Workers are started with `fork` before the parent starts any thread, so nothing has to be re-imported. Callers
opt in (`validate_jsonl(workers=...)`); servers keep the default of one process.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

from synth_ai.datasets.reader import CHUNK_SIZE, LineReader, split_ranges
from synth_ai.datasets.records import RecordOptions
from synth_ai.datasets.report import DatasetIssue, DatasetReport

_SUMMED = ("blank_lines", "records", "examples", "invalid_records", "messages", "images", "images_trimmed",
           "tool_calls", "text_chars")


def _worker(conn: Any, path: str, start: int, end: int, opts: RecordOptions, max_errors: int, fast: bool) -> None:
    from synth_ai.datasets.validate import scan_lines

    try:
        part = DatasetReport(path=path, max_errors=max_errors)
        scan_lines(LineReader(path, hash=False, start=start, end=end), opts, part, fast=fast)
        conn.send(("ok", part))
    except BaseException as exc:  # reported to the parent, which raises
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        while chunk := fh.read(CHUNK_SIZE):
            digest.update(chunk)
    return digest.hexdigest()


def scan_parallel(path: Path, opts: RecordOptions, report: DatasetReport, workers: int, *, fast: bool = True,
                  sha256: bool = True) -> None:
    """Fill `report` (issues, counts, summary, sha256, bytes) using `workers` processes, this one included."""
    from synth_ai.datasets.validate import scan_lines

    ranges = split_ranges(path, workers)
    ctx = multiprocessing.get_context("fork")
    running: list[tuple[Any, Any]] = []
    parts: list[DatasetReport] = []
    hasher: threading.Thread | None = None
    digest: list[str] = []
    try:
        for start, end in ranges[1:]:  # forked before this process starts any thread
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_worker, args=(send, str(path), start, end, opts, report.max_errors, fast),
                               name="synth-ai-validate", daemon=True)
            proc.start()
            send.close()
            running.append((proc, recv))
        if sha256:  # hashlib releases the GIL: the digest is computed alongside this process's own range
            hasher = threading.Thread(target=lambda: digest.append(_sha256(path)), name="synth-ai-sha256",
                                      daemon=True)
            hasher.start()
        first = DatasetReport(path=str(path), max_errors=report.max_errors)
        start, end = ranges[0]
        scan_lines(LineReader(path, hash=False, start=start, end=end), opts, first, fast=fast)
        parts.append(first)
        for proc, recv in running:
            try:
                status, payload = recv.recv()
            except EOFError:
                proc.join()
                raise RuntimeError(f"a dataset validation worker died (exit code {proc.exitcode})") from None
            if status != "ok":
                raise RuntimeError(f"a dataset validation worker failed: {payload}")
            parts.append(payload)
    finally:
        for proc, recv in running:
            recv.close()
            if proc.is_alive():
                proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        if hasher is not None:
            hasher.join()
    merge_parts(report, parts)
    report.sha256 = digest[0] if digest else None
    report.summary.bytes = os.path.getsize(path)


def merge_parts(report: DatasetReport, parts: list[DatasetReport]) -> None:
    """Add consecutive ranges' reports to `report`, shifting line numbers; file order is kept."""
    s = report.summary
    offset = s.lines
    for part in parts:
        for mine, theirs, attr in ((report.errors, part.errors, "error_count"),
                                   (report.warnings, part.warnings, "warning_count")):
            for issue in theirs:
                if len(mine) >= report.max_errors:
                    break
                mine.append(DatasetIssue(None if issue.line is None else issue.line + offset, issue.message))
            setattr(report, attr, getattr(report, attr) + getattr(part, attr))
        for name in _SUMMED:
            setattr(s, name, getattr(s, name) + getattr(part.summary, name))
        offset += part.summary.lines
    s.lines = offset
