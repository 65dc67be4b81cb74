"""`GET {prefix}/{id}/events/stream`: a job's status, events, metric points and timeline as server-sent events.

Frames: `event: status|event|metric|timeline|end`, `data:` one JSON document, `id:` the cursor after that frame
(`<event seq>.<metric rowid>.<timeline id>`). A client that reconnects with `Last-Event-ID: <cursor>` (or
`?since_seq=N` for events only) gets exactly what it has not seen; the current status is always sent first. A
comment line (`: keep-alive`) goes out after `?heartbeat=` seconds (default `HEARTBEAT_S`) without news, so proxies
and clients can tell a quiet job from a dead connection. The stream ends with an `end` frame once the job is
terminal and everything it wrote was sent.

New rows are noticed within `changes.POLL_S` of their commit (see `synth_ai.backend.api.changes`), so an event reaches
the client well within a second. Each read is one SQLite read transaction: status and rows come from the same
snapshot, so a terminal status is never seen before the rows written ahead of it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from synth_ai.backend.api.state import Backend, get_backend
from synth_ai.backend.http_errors import ApiError
from synth_ai.backend.store import job_records as J
from synth_ai.backend.store.db import MAX_INTEGER, transaction

HEARTBEAT_S = 10.0
EVENTS_BATCH = 500
METRICS_BATCH = 2000


@dataclass
class Cursor:
    seq: int = 0
    metric_row: int = 0
    timeline_id: int = 0

    def __str__(self) -> str:
        return f"{self.seq}.{self.metric_row}.{self.timeline_id}"

    @classmethod
    def parse(cls, raw: str) -> Cursor:
        parts = raw.strip().split(".")
        try:
            numbers = [int(p) for p in parts]
        except ValueError:
            numbers = []
        if len(numbers) != 3 or min(numbers) < 0:
            raise ApiError(400, "invalid_request", f"Last-Event-ID {raw[:60]!r} is not a cursor of this stream.",
                           hint="Send back the `id:` of the last frame received (three numbers, e.g. 12.340.5), "
                                "or reconnect with ?since_seq=N.")
        return cls(*numbers)


@dataclass
class Batch:
    job: dict[str, Any]
    events: list[dict[str, Any]]
    metrics: list[tuple[int, dict[str, Any]]]
    timeline: list[tuple[int, dict[str, Any]]]

    @property
    def full(self) -> bool:
        return len(self.events) >= EVENTS_BATCH or len(self.metrics) >= METRICS_BATCH


def read_batch(backend: Backend, job_id: str, cursor: Cursor) -> Batch:
    conn = backend.db.conn()
    with transaction(conn, immediate=False):
        row = backend.jobs.get(job_id, conn)
        events = backend.jobs.events(job_id, since_seq=cursor.seq, limit=EVENTS_BATCH)
        # By rowid, not step: a point rewritten later (a resumed run) comes again, and the scan starts at the
        # cursor instead of at the job's first point.
        metrics = [(r["rowid"], {"name": r["name"], "step": r["step"], "value": r["value"], "phase": r["phase"],
                                 "created_at": r["created_at"]})
                   for r in conn.execute("SELECT rowid, * FROM metrics NOT INDEXED WHERE rowid > ? AND job_id = ? "
                                         "ORDER BY rowid LIMIT ?", (cursor.metric_row, job_id, METRICS_BATCH))]
        timeline = [(r["id"], {"phase": r["phase"], "message": r["message"], "created_at": r["created_at"]})
                    for r in conn.execute("SELECT id, phase, message, created_at FROM timeline "
                                          "WHERE job_id = ? AND id > ? ORDER BY id", (job_id, cursor.timeline_id))]
    return Batch(J.job_json(row, backend.jobs.files_of(job_id)) if row is not None else {}, events, metrics,
                 timeline)


def frame(kind: str, data: Any, cursor: Cursor) -> str:
    return f"id: {cursor}\nevent: {kind}\ndata: {json.dumps(data, default=str)}\n\n"


async def job_frames(backend: Backend, job_id: str, cursor: Cursor, heartbeat_s: float) -> AsyncIterator[str]:
    watcher = backend.changes
    last_status = None
    async with watcher.subscribed():
        yield "retry: 1000\n\n"
        while True:
            generation = watcher.generation
            batch = await asyncio.to_thread(read_batch, backend, job_id, cursor)
            status = batch.job.get("status")
            if status != last_status:
                last_status = status
                yield frame("status", batch.job, cursor)
            for entry_id, entry in batch.timeline:
                cursor.timeline_id = entry_id
                yield frame("timeline", entry, cursor)
            for event in batch.events:
                cursor.seq = event["seq"]
                yield frame("event", event, cursor)
            for row_id, point in batch.metrics:
                cursor.metric_row = row_id
                yield frame("metric", point, cursor)
            if batch.full:
                continue  # more is waiting: send it before anything else
            if status in J.TERMINAL or not batch.job:
                yield frame("end", {"job_id": job_id, "status": status}, cursor)
                return
            if not await watcher.wait_past(generation, heartbeat_s):
                yield ": keep-alive\n\n"


def add_stream_route(router: APIRouter, prefix: str, kind: str | None,
                     load_job: Callable[[Backend, str, str | None], Any]) -> None:
    """`load_job(backend, job_id, kind)` answers 404 for a job of another kind (the caller's lookup; None: any)."""

    @router.get(f"{prefix}/{{job_id}}/events/stream")
    def stream_job(request: Request, job_id: str, since_seq: int = Query(0, ge=0, le=MAX_INTEGER),
                   heartbeat: float = Query(HEARTBEAT_S, ge=0.1, le=300),
                   last_event_id: str | None = Header(None)) -> StreamingResponse:
        backend = get_backend(request)
        load_job(backend, job_id, kind)
        cursor = Cursor.parse(last_event_id) if last_event_id else Cursor(seq=since_seq)
        return StreamingResponse(job_frames(backend, job_id, cursor, heartbeat), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

