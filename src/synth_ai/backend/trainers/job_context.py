"""What a training run is handed besides its spec: the two small interfaces the worker's objects fill.

`run_sft` and `run_rl` (and any other kind's run) take `(spec, *, workdir, model_store, reporter, should_stop)`.
The worker passes its `Reporter` (events and metrics into SQLite) and the backend's `ModelStore`; benches and
tests pass their own. Only the members named here are used by the trainers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol


class JobReporter(Protocol):
    """Where a run reports: events (prefixed with the kind's name by the worker) and metric points."""

    def event(self, type: str, message: str, data: dict[str, Any] | None = None,  # noqa: A002
              level: str = "info") -> Any: ...

    def metric(self, name: str, step: int, value: float, phase: str = "train") -> None: ...


class ModelLocator(Protocol):
    """Where a run finds a model's weights, and where it registers the model it made."""

    def resolve(self, model_id: str) -> Path: ...

    def register_fine_tuned(self, model_id: str, base_model: str, job_id: str | None, path: Path) -> None: ...


StopCheck = Callable[[], bool]  # True once the run should stop (a cancel, SIGTERM, the backend gone)
