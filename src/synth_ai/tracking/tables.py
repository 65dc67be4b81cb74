"""Sample tables (an RL iteration's rollouts, an eval's per-seed scores) as they travel in a job's events: a
`sample_table` key in the event's data marks one, so the live tracker and the backfill (`synth-ai jobs log`) read
the same rows from the same place. Cells are short: text is cut at MAX_CELL_CHARS."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TABLE_MARK = "sample_table"
MAX_CELL_CHARS = 2000


@dataclass(frozen=True)
class SampleTable:
    name: str  # e.g. "rollouts", "eval/seeds"
    step: int
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


def cell(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = str(value)
    return text if len(text) <= MAX_CELL_CHARS else text[:MAX_CELL_CHARS - 1] + "…"


def table_event_data(name: str, step: int, columns: list[str], rows: list[list[Any]]) -> dict[str, Any]:
    return {TABLE_MARK: name, "step": int(step), "columns": list(columns),
            "rows": [[cell(v) for v in row] for row in rows]}


def table_from_event(data: Any) -> SampleTable | None:
    """The table an event's data carries, or None (any other event, or a malformed table)."""
    if not isinstance(data, dict) or not isinstance(data.get(TABLE_MARK), str):
        return None
    columns, rows, step = data.get("columns"), data.get("rows"), data.get("step")
    if not (isinstance(columns, list) and isinstance(rows, list) and isinstance(step, int)):
        return None
    width = len(columns)
    good = tuple(tuple(cell(v) for v in row) for row in rows if isinstance(row, list) and len(row) == width)
    return SampleTable(data[TABLE_MARK], step, tuple(str(c) for c in columns), good)


def as_records(table: SampleTable) -> list[dict[str, Any]]:
    return [dict(zip(table.columns, row, strict=True)) for row in table.rows]


def as_markdown(table: SampleTable) -> str:
    """TensorBoard's text plugin renders Markdown tables."""
    def esc(value: Any) -> str:
        return str("" if value is None else value).replace("|", "\\|").replace("\n", "<br>")

    lines = ["| " + " | ".join(esc(c) for c in table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in table.rows]
    return "\n".join(lines)
