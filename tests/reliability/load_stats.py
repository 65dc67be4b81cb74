"""Recording what a load run saw: every HTTP exchange (status, latency, whether the body said "database is
locked") through a real httpx transport, and the figures drawn from them."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import httpx

BACK_PRESSURE = {429, 503}  # documented: the inference queue is full (429 + Retry-After), unavailable (503)


@dataclass
class Exchange:
    op: str
    status: int | None  # None: the request failed in flight
    seconds: float
    locked: bool = False
    error: str | None = None


@dataclass
class LoadLog:
    exchanges: list[Exchange] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # operations that failed for the client, after its retries
    op_seconds: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def timed(self, op: str, seconds: float) -> None:
        with self._lock:
            self.op_seconds[op].append(seconds)

    def failed(self, what: str) -> None:
        with self._lock:
            self.failures.append(what)

    def figures(self) -> dict:
        statuses: dict[str, int] = defaultdict(int)
        for e in self.exchanges:
            statuses[str(e.status) if e.status is not None else "in-flight error"] += 1
        unexpected = [e for e in self.exchanges if e.status is None or (e.status >= 400 and e.status not in
                                                                       BACK_PRESSURE)]
        return {
            "requests": len(self.exchanges), "statuses": dict(statuses),
            "unexpected": [f"{e.op}: {e.status} {e.error or ''}".strip() for e in unexpected][:20],
            "unexpected_count": len(unexpected), "database_locked": sum(e.locked for e in self.exchanges),
            "client_failures": self.failures[:20], "client_failure_count": len(self.failures),
            "p50_s": {op: round(percentile(v, 50), 3) for op, v in sorted(self.op_seconds.items())},
            "p95_s": {op: round(percentile(v, 95), 3) for op, v in sorted(self.op_seconds.items())},
            "max_s": {op: round(max(v), 3) for op, v in sorted(self.op_seconds.items())},
        }


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))  # nearest rank
    return ordered[rank]


class RecordingTransport(httpx.HTTPTransport):
    """A real transport that logs each exchange: the route template as `op`, status, latency, body check."""

    def __init__(self, log: LoadLog, **kwargs) -> None:
        super().__init__(**kwargs)
        self.log = log

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        started = time.monotonic()
        op = f"{request.method} {_template(request.url.path)}"
        try:
            response = super().handle_request(request)
            body = response.read()
        except httpx.HTTPError as exc:
            self.log.add(Exchange(op, None, time.monotonic() - started, error=type(exc).__name__))
            raise
        self.log.add(Exchange(op, response.status_code, time.monotonic() - started,
                              locked=b"database is locked" in body.lower()))
        return response


def _template(path: str) -> str:
    """`/api/learning/jobs/job_1a2b/events` -> `/api/learning/jobs/{id}/events`."""
    return "/".join("{id}" if part.startswith(("job_", "file_", "file-", "job-")) else part
                    for part in path.split("/"))
