"""Choosing seeds by task metadata (`--metadata k=v`, `--metadata-sql`), from the task app's `/task_info`.

One row per seed, as synth-ai 0.2.17 builds it from the taskset (`scenario_ids`, `loop_ids`, `thread_ids`,
`difficulty_map`, indexed by seed), extended with each seed's own `task_metadata` (`GET /task_info?seed=…`): every
scalar value becomes a column too, so apps that describe their instances (the math app: `problem`, `index`,
`split`) can be filtered without a taskset table. `--metadata` matches exactly, case-insensitively, and all
pairs must match; `--metadata-sql` runs against an in-memory SQLite table `tasks(seed, scenario_id, loop_id,
thread_id, difficulty, …)` and keeps the seeds it returns (column `seed`, else the first column).
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

from synth_ai.errors import InvalidInputError

BASE_COLUMNS = ("seed", "scenario_id", "loop_id", "thread_id", "difficulty")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def taskset_rows(taskset: Any, seeds: list[int]) -> dict[int, dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    if not isinstance(taskset, dict):
        return rows
    columns = {"scenario_id": taskset.get("scenario_ids"), "loop_id": taskset.get("loop_ids"),
               "thread_id": taskset.get("thread_ids")}
    difficulty = taskset.get("difficulty_map") if isinstance(taskset.get("difficulty_map"), dict) else {}
    for seed in seeds:
        row: dict[str, Any] = {}
        for name, values in columns.items():
            if isinstance(values, list) and 0 <= seed < len(values):
                row[name] = values[seed]
        scenario = row.get("scenario_id")
        if isinstance(scenario, str) and scenario in difficulty:
            row["difficulty"] = difficulty[scenario]
        elif str(seed) in difficulty:
            row["difficulty"] = difficulty[str(seed)]
        if row:
            rows[seed] = row
    return rows


def instance_rows(instances: Any, seeds: list[int]) -> dict[int, dict[str, Any]]:
    """Scalar `task_metadata` values of each seed's TaskInfo (one object for one seed, else a list in order)."""
    items = instances if isinstance(instances, list) else [instances]
    rows: dict[int, dict[str, Any]] = {}
    for seed, info in zip(seeds, items, strict=False):
        meta = info.get("task_metadata") if isinstance(info, dict) else None
        if isinstance(meta, dict):
            rows[seed] = {k: v for k, v in meta.items()
                          if _IDENT.match(str(k)) and k != "seed" and (v is None or isinstance(v, (str, int, float)))}
    return rows


async def fetch_rows(client: Any, seeds: list[int]) -> dict[int, dict[str, Any]]:
    """Metadata rows for `seeds`; {} when the app describes nothing."""
    rows: dict[int, dict[str, Any]] = {}
    taskset = await _get_json(client, "/task_info", None)
    if isinstance(taskset, dict):
        rows = taskset_rows(taskset.get("taskset", taskset), seeds)
    instances = await _get_json(client, "/task_info", [("seed", s) for s in seeds])
    for seed, extra in instance_rows(instances, seeds).items():
        rows[seed] = {**extra, **rows.get(seed, {})}
    return rows


async def _get_json(client: Any, path: str, params: Any) -> Any:
    """The JSON of a 200 answer; None for anything else (the seeds are then described by what is known)."""
    from synth_ai.taskapp.client import TaskAppClient
    from synth_ai.taskapp.failures import TaskAppFailure

    try:
        answer = await TaskAppClient(str(client.base_url), http=client).get(path, params=params)
        return answer.json() if answer.status_code == 200 else None
    except (TaskAppFailure, ValueError):
        return None


def filter_by_metadata(rows: dict[int, dict[str, Any]], seeds: list[int], wanted: dict[str, str]) -> list[int]:
    kept = []
    for seed in seeds:
        row = {"seed": seed, **rows.get(seed, {})}
        if all(row.get(k) is not None and str(row[k]).lower() == v.lower() for k, v in wanted.items()):
            kept.append(seed)
    return kept


def filter_by_sql(rows: dict[int, dict[str, Any]], seeds: list[int], query: str) -> list[int]:
    extra = sorted({k for row in rows.values() for k in row} - set(BASE_COLUMNS))
    columns = [*BASE_COLUMNS, *extra]
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE TABLE tasks (seed INTEGER, " + ", ".join(f'"{c}"' for c in columns[1:]) + ")")
        for seed in seeds:
            row = {"seed": seed, **rows.get(seed, {})}
            conn.execute(f"INSERT INTO tasks VALUES ({', '.join('?' * len(columns))})",
                         [row.get(c) for c in columns])
        try:
            cursor = conn.execute(query)
            fetched = cursor.fetchall()
        except sqlite3.Error as exc:
            raise InvalidInputError(
                f"Failed to execute metadata SQL query {query!r}: {exc}",
                hint=f"The query runs against table `tasks` with columns: {', '.join(columns)}.") from None
        names = [d[0] for d in cursor.description or []]
        position = names.index("seed") if "seed" in names else 0
        found: set[int] = set()
        for record in fetched:
            try:
                found.add(int(record[position]))
            except (TypeError, ValueError):
                raise InvalidInputError(
                    f"Metadata SQL query {query!r} returned {record[position]!r}, not a seed.",
                    hint="Select the seed column, e.g. SELECT seed FROM tasks WHERE ...") from None
        return [s for s in seeds if s in found]
    finally:
        conn.close()


async def select_seeds(client: Any, seeds: list[int], metadata: dict[str, str], sql: str | None) -> list[int]:
    if not metadata and not sql:
        return seeds
    rows = await fetch_rows(client, seeds)
    if not rows:
        raise InvalidInputError("Task metadata filters require the task app to expose /task_info metadata.",
                                hint="This app describes no per-seed metadata; drop --metadata/--metadata-sql.")
    if sql:
        seeds = filter_by_sql(rows, seeds, sql)
    if metadata:
        seeds = filter_by_metadata(rows, seeds, metadata)
    if not seeds:
        columns = sorted({"seed", *BASE_COLUMNS, *(k for r in rows.values() for k in r)})
        raise InvalidInputError("No seeds match the provided metadata filters.",
                                hint=f"Adjust the metadata filters or the seed list (columns: {', '.join(columns)}).")
    return seeds
