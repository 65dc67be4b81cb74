"""The fan-out from a run to its trackers, away from the run: every call only queues, one background thread talks
to the trackers, and a tracker that fails (missing library, bad credentials, unreachable server) is dropped with one
warning naming it and the fix. Nothing here raises into the caller: tracking never fails, nor stalls, a job."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

from synth_ai.env.secrets import redact
from synth_ai.tracking.settings import TrackingSettings
from synth_ai.tracking.tables import SampleTable, table_from_event

log = logging.getLogger("synth_ai.tracking")
CLOSE_WAIT_S = 120.0  # how long the end of a run waits for the trackers to write what is queued

# warn(tracker name, what went wrong, how to fix it)
Warn = Callable[[str, str, str], None]
Point = tuple[str, int, "float | None", str]


def make_sinks(names: Iterable[str]) -> list[Any]:
    from synth_ai.tracking.mlflow_sink import MlflowSink
    from synth_ai.tracking.tensorboard_sink import TensorBoardSink
    from synth_ai.tracking.wandb_sink import WandbSink

    kinds = {"wandb": WandbSink, "tensorboard": TensorBoardSink, "mlflow": MlflowSink}
    return [kinds[name]() for name in names]


class Tracker:
    def __init__(self, settings: TrackingSettings, *, config: dict[str, Any], warn: Warn,
                 sinks: list[Any] | None = None) -> None:
        self.settings = settings
        self.warn = warn
        self.sinks = make_sinks(settings.report_to) if sinks is None else sinks
        self.failed: dict[str, str] = {}  # tracker name: why it was dropped
        self._queue: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="synth-ai-tracking", daemon=True)
        self._queue.put(("start", config))
        self._thread.start()

    # What the run calls: each only queues --------------------------------------------------------------------
    def points(self, points: Iterable[Point]) -> None:
        """Metric points (name, step, value, phase), grouped by step; names are taken as they come, so new metrics
        (an async trainer's staleness.mean, mismatch_kl, ...) need no change here."""
        by_step: dict[int, dict[str, float]] = {}
        for name, step, value, _phase in points:
            if value is not None:
                by_step.setdefault(int(step), {})[str(name)] = float(value)
        for step in sorted(by_step):
            self._put("log", (step, by_step[step]))

    def event(self, data: Any) -> None:
        """An event's data: a sample table it carries goes to the trackers; anything else is ignored."""
        table = table_from_event(data)
        if table is not None and self.settings.sample_rows > 0:
            rows = table.rows[:self.settings.sample_rows]
            self._put("table", SampleTable(table.name, table.step, table.columns, rows))

    def close(self, *, status: str, summary: dict[str, Any] | None = None, tags: list[str] | None = None,
              wait_s: float = CLOSE_WAIT_S) -> None:
        """Write the summary (final model, job id), mark the runs ended and wait for the queue to drain."""
        if self._closed:
            return
        self._put("finish", ({k: v for k, v in (summary or {}).items() if v is not None}, list(tags or []), status))
        self._closed = True
        self._queue.put(None)
        self._thread.join(wait_s)
        if self._thread.is_alive():
            log.warning("tracking: the trackers did not finish writing within %.0f s; leaving them", wait_s)

    # The background thread -----------------------------------------------------------------------------------
    def _put(self, what: str, payload: Any) -> None:
        if not self._closed:
            self._queue.put((what, payload))

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            what, payload = item
            for sink in list(self.sinks):
                self._call(sink, what, payload)

    def _call(self, sink: Any, what: str, payload: Any) -> None:
        try:
            if what == "start":
                sink.start(self.settings, payload)
            elif what == "log":
                sink.log(*payload)
            elif what == "table":
                sink.table(payload)
            else:
                sink.finish(*payload)
        except BaseException as exc:  # noqa: BLE001 - any tracker failure drops that tracker, never the run
            self.sinks.remove(sink)
            reason = redact(_reason(exc))
            self.failed[sink.name] = reason
            try:
                self.warn(sink.name, reason, sink.fix)
            except Exception:  # noqa: BLE001 - the warning is best effort too
                log.exception("tracking: could not record the warning about %s", sink.name)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ModuleNotFoundError):
        return f"its library is not installed ({exc.name})"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


def warning_message(name: str, reason: str, fix: str) -> str:
    """The one warning a dropped tracker gets, worded the same for jobs, evals and backfills."""
    return f"Tracking to {name} is off for this run: {reason}. The run goes on without it. To fix: {fix}."
