"""The hot loop of dataset validation: check each line a reader gives and add the verdicts to a report.

One module of its own so that `validate` (one process) and `parallel` (one range per forked child) both call it
without importing each other.
"""

from __future__ import annotations

from synth_ai.datasets.image_payloads import shorten
from synth_ai.datasets.reader import LineReader, is_blank
from synth_ai.datasets.records import check_line
from synth_ai.datasets.report import DatasetIssue, DatasetReport

TYPE_CHECKING = False  # annotations only: see slots
if TYPE_CHECKING:
    from collections.abc import Callable

    from synth_ai.datasets.records import RecordOptions

# The msgspec fast path pays for its import (~10 ms of a start-up) only on files with many records: the first ones
# take the full rules (json), which is as quick when records are few and their images were cut short.
_FAST_AFTER = 256
# Shorter lines are parsed as they are: below this the fast path's decoder runs over a line's images quicker than
# cutting them out costs (60 MB of 1-6 KB frames: 0.25 s of CPU cut at 1 KiB, 0.15 s uncut).
_SHORTEN_MIN = 16 << 10


def _fast_path() -> Callable[[bytes | memoryview, RecordOptions], tuple[int, int, int, int] | None] | None:
    try:
        from synth_ai.datasets.fastpath import fast_record
    except ImportError:  # msgspec missing: every record takes the full rules (same verdicts, slower)
        return None
    return fast_record


def scan_lines(reader: LineReader, opts: RecordOptions, report: DatasetReport, *, limit: int | None = None,
               fast: bool = True) -> int:
    """The hot loop: check every line `reader` gives, adding to `report` (issues, counts, summary).

    Each line's image payloads are checked first and cut short (`image_payloads.shorten`), so the rules parse only the
    rest. Returns the bytes consumed (what a pass that `limit` stopped early covered).
    """
    fast_record = None
    s = report.summary
    errors, warnings, max_errors = report.errors, report.warnings, report.max_errors
    max_bytes = opts.max_image_bytes
    records = examples = messages = images = tool_calls = chars = blank = 0
    consumed = 0
    line_no = 0
    spans = reader.spans()
    try:
        for first, buf, bounds in spans:
            line_no = first - 1
            view = memoryview(buf)
            for k in range(0, len(bounds), 2):
                start, end = bounds[k], bounds[k + 1]
                line_no += 1
                if buf[start] != 123 and is_blank(view[start:end]):  # 123: "{", how records start
                    blank += 1
                    consumed += end - start + 1
                    continue
                if limit is not None and records >= limit:
                    line_no -= 1
                    return consumed
                records += 1
                consumed += end - start + 1
                if records == _FAST_AFTER and fast:
                    fast_record = _fast_path()
                short = shorten(buf, start, end, max_bytes) if end - start > _SHORTEN_MIN else None
                line = view[start:end] if short is None else short
                if fast_record is not None:
                    counts = fast_record(line, opts)
                    if counts is not None:
                        examples += 1
                        messages += counts[0]
                        images += counts[1]
                        tool_calls += counts[2]
                        chars += counts[3]
                        continue
                res = check_line(line, opts)
                if short is not None and (res.errors or res.warnings):
                    res = check_line(view[start:end], opts)  # in the original's own words and columns
                if res.errors:
                    s.invalid_records += 1
                    for message in res.errors:
                        report.error_count += 1
                        if len(errors) < max_errors:
                            errors.append(DatasetIssue(line_no, message))
                else:
                    examples += 1
                    messages += res.messages
                    images += res.images
                    s.images_trimmed += res.images_dropped
                    tool_calls += res.tool_calls
                    chars += res.text_chars
                for message in res.warnings:
                    report.warning_count += 1
                    if len(warnings) < max_errors:
                        warnings.append(DatasetIssue(line_no, message))
        return consumed
    finally:
        spans.close()  # stops the hashing thread when `limit` ends the pass early
        s.lines = line_no
        s.blank_lines = blank
        s.records = records
        s.examples = examples
        s.messages = messages
        s.images = images
        s.tool_calls = tool_calls
        s.text_chars = chars
