"""`run_filter`: read a trace database, keep the sessions that pass every rule, write their SFT records.

One pass: sessions stream from the database in a fixed order (oldest first, or the seeded shuffle), each is
checked against the rules, the kept ones' messages are read and turned into records, `offset` records are
skipped and the rest are written until `limit`, at which point reading stops. The output replaces the previous
file only when complete, and only when at least one record was written.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.datasets.records import RecordOptions, check_record
from synth_ai.errors import InvalidInputError, NoMatchError
from synth_ai.filter.options import FilterOptions
from synth_ai.filter.records import session_records
from synth_ai.filter.rules import RULES, Candidate, build_rules, parse_created_at
from synth_ai.filter.writer import AtomicJsonlWriter
from synth_ai.tracing.reader import SessionRow, TraceReader

_SFT_RULES = RecordOptions()  # the rules `synth-ai files validate` applies without a model

NO_MATCH_MESSAGE = ("No sessions matched the provided filters. "
                    "Adjust the filter thresholds or choose a different dataset.")


@dataclass
class FilterReport:
    db: Path
    output: Path
    sessions_total: int = 0
    sessions_read: int = 0
    sessions_kept: int = 0  # passed every rule and gave at least one example
    dropped: dict[str, int] = field(default_factory=dict)  # rule -> sessions it dropped ("no_examples" last)
    examples_matched: int = 0
    examples_invalid: int = 0  # records the SFT dataset rules refuse (stored content no trainer could read)
    examples_skipped: int = 0  # by `offset`
    examples_written: int = 0
    stopped_at_limit: bool = False

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "db": str(self.db), "output": str(self.output),
            "sessions": {"total": self.sessions_total, "read": self.sessions_read, "kept": self.sessions_kept,
                         "dropped": dict(self.dropped)},
            "examples": {"matched": self.examples_matched, "skipped_by_offset": self.examples_skipped,
                         "written": self.examples_written},
            "stopped_at_limit": self.stopped_at_limit,
        }
        if self.examples_invalid:  # only when it happened, so the usual document keeps 0.2.17's keys
            doc["examples"]["invalid"] = self.examples_invalid
        return doc


def _metadata(session: SessionRow) -> dict[str, Any]:
    raw = session.metadata
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def run_filter(options: FilterOptions) -> FilterReport:
    report = FilterReport(db=options.db, output=options.output)
    rules = build_rules(options)
    report.dropped = {name: 0 for name in RULES if any(name == r for r, _ in rules)}
    report.dropped["no_examples"] = 0
    with TraceReader(options.db) as reader:
        try:
            _read(reader, options, rules, report)
        except sqlite3.DatabaseError as exc:  # locked past the busy timeout, corrupt pages, ...
            raise InvalidInputError(f"Reading the trace database {options.db} failed: {exc}.",
                                    hint="Check the file with `sqlite3 DB 'PRAGMA integrity_check'`; "
                                    "nothing was written.") from exc
    return report


def _read(reader: TraceReader, options: FilterOptions, rules: list, report: FilterReport) -> None:
    report.sessions_total = reader.count_sessions()
    if report.sessions_total == 0:
        raise NoMatchError(f"No traces found in database ({options.db}).",
                           hint="Run `synth-ai eval` or a traced task app (`synth-ai serve --trace-db`) first.",
                           details=report.to_dict())
    with AtomicJsonlWriter(options.output) as writer:
        _select(reader, options, rules, report, writer)
        if writer.count == 0:
            raise NoMatchError(_empty_message(report, options), hint=drop_summary(report),
                               details=report.to_dict())
        writer.commit()


def _select(reader: TraceReader, options: FilterOptions, rules: list, report: FilterReport,
            writer: AtomicJsonlWriter) -> None:
    to_skip, limit = options.offset, options.limit
    for session in reader.sessions(shuffle_seed=options.shuffle_seed):
        report.sessions_read += 1
        metadata = _metadata(session)
        created = parse_created_at(session.created_at)
        score = session.total_reward if session.total_reward is not None else metadata.get("official_score")
        candidate = Candidate(metadata, created, score)
        failed = next((name for name, passes in rules if not passes(candidate)), None)
        if failed is not None:
            report.dropped[failed] += 1
            continue
        produced = 0
        for record in session_records(session, metadata, reader.messages(session.session_id),
                                      created.isoformat() if created else None):
            if check_record(record, _SFT_RULES).errors:  # the output must be a dataset `train` accepts
                report.examples_invalid += 1
                continue
            produced += 1
            report.examples_matched += 1
            if to_skip:
                to_skip -= 1
                report.examples_skipped += 1
                continue
            writer.write(record)
            if limit is not None and writer.count >= limit:
                break
        if produced:
            report.sessions_kept += 1
        else:
            report.dropped["no_examples"] += 1
        if limit is not None and writer.count >= limit:
            report.stopped_at_limit = True
            break
    report.examples_written = writer.count


def drop_summary(report: FilterReport) -> str:
    """"Read N sessions (of M); dropped: rule n, ..." (the rules that dropped something)."""
    of = f" (of {report.sessions_total})" if report.sessions_read != report.sessions_total else ""
    drops = ", ".join(f"{name} {n}" for name, n in report.dropped.items())
    return f"Read {report.sessions_read} sessions{of}; dropped by rule: {drops}."


def _empty_message(report: FilterReport, options: FilterOptions) -> str:
    if report.examples_matched and report.examples_skipped >= report.examples_matched:
        return (f"All {report.examples_matched} matching examples were skipped by offset = {options.offset}. "
                "Lower [filter].offset.")
    return NO_MATCH_MESSAGE
