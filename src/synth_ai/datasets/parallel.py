"""Validate a large JSONL file with several processes: one byte range of whole lines each, then merge.

Records are independent, so a file cut at line boundaries (`reader.split_ranges`) can be checked in parts by
forked child processes (this process takes the first range), each in constant memory. The merged report is
identical to a single-process pass: line numbers are shifted by the lines of the ranges before, the first
`max_errors` issues are kept in file order (each child keeps its own first `max_errors`, so the global first ones
are among them), and counts add up. When asked, this process hashes the whole file (sha256) on a thread meanwhile.

Children are plain `os.fork`s sending their part back through a pipe with `marshal`: `multiprocessing` and
`pickle` alone take longer to import than checking a 60 MB file takes one core (they load `re`, `threading`,
`socket`...), which is why a second core used to pay off only past 128 MiB. Forking happens before this process
starts any thread. Callers opt in (`validate_jsonl(workers=...)`); servers keep the default of one process.
"""

from __future__ import annotations

import marshal
import os

from synth_ai.datasets.reader import CHUNK_SIZE, LineReader, split_ranges
from synth_ai.datasets.report import DatasetIssue, DatasetReport

TYPE_CHECKING = False  # annotations only: see slots
if TYPE_CHECKING:
    from pathlib import Path

    from synth_ai.datasets.records import RecordOptions

_SIGKILL = 9  # POSIX fixes it; `import signal` would load enum for a constant (forking is Linux-only here)
_SUMMED = ("lines", "blank_lines", "records", "examples", "invalid_records", "messages", "images", "images_trimmed",
           "tool_calls", "text_chars")


def _pack(part: DatasetReport) -> tuple:
    """A range's report as plain values `marshal` can carry."""
    s = part.summary
    return (tuple(getattr(s, name) for name in _SUMMED), part.error_count, part.warning_count,
            [(i.line, i.message) for i in part.errors], [(i.line, i.message) for i in part.warnings])


def _unpack(packed: tuple, path: str, max_errors: int) -> DatasetReport:
    counts, error_count, warning_count, errors, warnings = packed
    part = DatasetReport(path=path, max_errors=max_errors)
    for name, value in zip(_SUMMED, counts):
        setattr(part.summary, name, value)
    part.error_count, part.warning_count = error_count, warning_count
    part.errors = [DatasetIssue(line, message) for line, message in errors]
    part.warnings = [DatasetIssue(line, message) for line, message in warnings]
    return part


def _scan_range(path: str, start: int, end: int, opts: RecordOptions, max_errors: int, fast: bool) -> DatasetReport:
    from synth_ai.datasets.scan import scan_lines

    part = DatasetReport(path=path, max_errors=max_errors)
    scan_lines(LineReader(path, hash=False, start=start, end=end), opts, part, fast=fast)
    return part


def _child(write_fd: int, path: str, start: int, end: int, opts: RecordOptions, max_errors: int,
           fast: bool) -> None:
    """In the forked child: check one range, write the result (or the failure) to the pipe and exit at once,
    without running the parent's exit handlers or flushing its copies of the parent's output buffers."""
    try:
        try:
            payload = marshal.dumps(("ok", _pack(_scan_range(path, start, end, opts, max_errors, fast))))
        except BaseException as exc:  # Ctrl-C included: the parent reports it
            payload = marshal.dumps(("error", f"{type(exc).__name__}: {exc}"))
        view = memoryview(payload)
        while view:
            view = view[os.write(write_fd, view):]
    finally:
        os._exit(0)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        while chunk := fh.read(CHUNK_SIZE):
            digest.update(chunk)
    return digest.hexdigest()


def scan_parallel(path: Path, opts: RecordOptions, report: DatasetReport, workers: int, *, fast: bool = True,
                  sha256: bool = True) -> None:
    """Fill `report` (issues, counts, summary, sha256, bytes) using `workers` processes, this one included."""
    name = str(path)
    ranges = split_ranges(path, workers)
    children: dict[int, int] = {}  # pid -> the read end of its pipe
    hasher = None
    digest: list[str] = []
    done = False
    try:
        for start, end in ranges[1:]:  # forked before this process starts any thread
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                _child(write_fd, name, start, end, opts, report.max_errors, fast)
            os.close(write_fd)
            children[pid] = read_fd
        if sha256:  # hashlib releases the GIL: the digest is computed alongside this process's own range
            import threading

            hasher = threading.Thread(target=lambda: digest.append(_sha256(path)), name="synth-ai-sha256",
                                      daemon=True)
            hasher.start()
        start, end = ranges[0]
        parts = [_scan_range(name, start, end, opts, report.max_errors, fast)]
        for pid, read_fd in children.items():
            data = _read_all(read_fd)
            if not data:
                _, status = os.waitpid(pid, 0)
                children[pid] = -1  # reaped
                raise RuntimeError(f"a dataset validation worker died ({_how_it_ended(status)})")
            outcome, payload = marshal.loads(data)
            if outcome != "ok":
                raise RuntimeError(f"a dataset validation worker failed: {payload}")
            parts.append(_unpack(payload, name, report.max_errors))
        done = True
    finally:
        for pid, read_fd in children.items():
            if read_fd == -1:
                continue
            os.close(read_fd)
            if not done:  # this process failed or was interrupted: its children's work is moot
                os.kill(pid, _SIGKILL)
            os.waitpid(pid, 0)
        if hasher is not None:
            hasher.join()
    merge_parts(report, parts)
    report.sha256 = digest[0] if digest else None
    report.summary.bytes = os.path.getsize(path)


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


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
        for name in _SUMMED[1:]:
            setattr(s, name, getattr(s, name) + getattr(part.summary, name))
        offset += part.summary.lines
    s.lines = offset
