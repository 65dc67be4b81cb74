"""The fan-out from a run to its trackers, away from the run: every call only queues. Each tracker has its own
queue and thread (`_Lane`), so a slow one (an MLflow server that does not answer, sitting in its client's retries)
delays neither the others nor the run. A tracker that fails (missing library, bad credentials, unreachable server,
a folder it cannot write) or whose one call runs past `CALL_LIMIT_S` is dropped with one warning naming it, the
cause and the fix. Nothing here raises into the caller: tracking never fails, nor stalls, a job."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from synth_ai.env.extras import pip_install
from synth_ai.env.secrets import redact
from synth_ai.tracking.settings import TrackingSettings
from synth_ai.tracking.tables import SampleTable, table_from_event

log = logging.getLogger("synth_ai.tracking")
CLOSE_WAIT_S = 120.0  # how long the end of a run waits, at most, for trackers that are still writing
CALL_LIMIT_S = 75.0  # one call longer than this drops the tracker (above wandb.init's own 60 s timeout)
INSTALL_FIX = f"install it ({pip_install('tracking')})"

# warn(tracker name, what went wrong, how to fix it)
Warn = Callable[[str, str, str], None]
Point = tuple[str, int, "float | None", str]


def make_sinks(names: Iterable[str]) -> list[Any]:
    from synth_ai.tracking.mlflow_sink import MlflowSink
    from synth_ai.tracking.tensorboard_sink import TensorBoardSink
    from synth_ai.tracking.wandb_sink import WandbSink

    kinds = {"wandb": WandbSink, "tensorboard": TensorBoardSink, "mlflow": MlflowSink}
    return [kinds[name]() for name in names]


class _Lane:
    """One tracker, its queue and its thread. `busy_since` (on the tracker's clock) is set while a call runs."""

    def __init__(self, sink: Any, call: Callable[[Any, str, Any], None], clock: Callable[[], float]) -> None:
        self.sink, self._call, self._clock = sink, call, clock
        self.queue: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self.busy_since: float | None = None
        self.dropped = False
        self.thread = threading.Thread(target=self._work, name=f"synth-ai-tracking-{sink.name}", daemon=True)

    def _work(self) -> None:
        while (item := self.queue.get()) is not None:
            if self.dropped:
                continue  # drain without calling a tracker that was given up on
            self.busy_since = self._clock()
            try:
                self._call(self, *item)
            finally:
                self.busy_since = None

    def overdue(self, now: float, limit: float) -> bool:
        since = self.busy_since
        return since is not None and now - since > limit


class Tracker:
    def __init__(self, settings: TrackingSettings, *, config: dict[str, Any], warn: Warn,
                 sinks: list[Any] | None = None, clock: Callable[[], float] = time.monotonic,
                 call_limit_s: float = CALL_LIMIT_S) -> None:
        self.settings = settings
        self.warn = warn
        self.failed: dict[str, str] = {}  # tracker name: why it was dropped
        self._clock, self._call_limit_s = clock, call_limit_s
        self._lock = threading.Lock()  # one drop (and one warning) per tracker, warnings one at a time
        self._closed = False
        made = make_sinks(settings.report_to) if sinks is None else sinks
        self._lanes = [_Lane(sink, self._call, clock) for sink in made]
        for lane in self._lanes:
            lane.queue.put(("start", config))
            lane.thread.start()

    @property
    def sinks(self) -> list[Any]:
        """The trackers still written to."""
        return [lane.sink for lane in self._lanes if not lane.dropped]

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
        """Write the summary (final model, job id), mark the runs ended and wait for the trackers to write what is
        queued: at most `wait_s`, and never for a tracker whose current call is past the call limit."""
        if self._closed:
            return
        self._put("finish", ({k: v for k, v in (summary or {}).items() if v is not None}, list(tags or []), status))
        self._closed = True
        for lane in self._lanes:
            lane.queue.put(None)
        deadline = self._clock() + wait_s
        for lane in self._lanes:
            while lane.thread.is_alive() and not lane.dropped:
                if self._drop_if_overdue(lane):
                    break
                if self._clock() >= deadline:
                    log.warning("tracking: %s did not finish writing within %.0f s; leaving it", lane.sink.name,
                                wait_s)
                    break
                lane.thread.join(0.05)

    # Inside --------------------------------------------------------------------------------------------------
    def _put(self, what: str, payload: Any) -> None:
        if self._closed:
            return
        for lane in self._lanes:
            if not lane.dropped and not self._drop_if_overdue(lane):
                lane.queue.put((what, payload))

    def _drop_if_overdue(self, lane: _Lane) -> bool:
        if not lane.overdue(self._clock(), self._call_limit_s):
            return False
        self._drop(lane, f"it did not answer within {self._call_limit_s:.0f} s (a server it cannot reach?)",
                   lane.sink.fix)
        return True

    def _call(self, lane: _Lane, what: str, payload: Any) -> None:
        sink = lane.sink
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
            self._drop(lane, redact(_reason(exc)), _fix(sink, exc))

    def _drop(self, lane: _Lane, reason: str, fix: str) -> None:
        with self._lock:
            if lane.dropped:
                return
            lane.dropped = True
            self.failed[lane.sink.name] = reason
            try:
                self.warn(lane.sink.name, reason, fix)
            except Exception:  # noqa: BLE001 - the warning is best effort too
                log.exception("tracking: could not record the warning about %s", lane.sink.name)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ModuleNotFoundError):
        return f"its library is not installed ({exc.name})"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


def _fix(sink: Any, exc: BaseException) -> str:
    """The fix for what went wrong: installing only when the library is missing; a folder it could not write is
    named (an unwritable WANDB_DIR or TensorBoard folder is no install problem)."""
    if isinstance(exc, ModuleNotFoundError):
        return f"{INSTALL_FIX}; then {sink.fix}"
    folder_setting = getattr(sink, "folder_setting", None)
    if isinstance(exc, OSError) and exc.filename and folder_setting:
        return f"make {exc.filename} writable for the backend, or set {folder_setting} to a folder it can write"
    return sink.fix


def warning_message(name: str, reason: str, fix: str) -> str:
    """The one warning a dropped tracker gets, worded the same for jobs, evals and backfills."""
    return f"Tracking to {name} is off for this run: {reason}. The run goes on without it. To fix: {fix}."
