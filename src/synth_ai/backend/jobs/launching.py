"""What the scheduler needs from an executor, and nothing of how one works.

The scheduler keeps what every job shares (the queue, the slots, reaping, attempts, the warm hand-off); an executor
(`synth_ai.backend.executors`: local, torchrun, modal) answers what differs: the process that runs a job, how a stop
reaches it, how its exit is read, and what a run a previous backend left behind means after a restart. The
executors live above this layer and are handed to the scheduler by the API side (`backend/api/state.py`), so
nothing here imports them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from synth_ai.backend.server_settings import BackendSettings
from synth_ai.errors import UnavailableError


class NoExecutorError(UnavailableError):
    """Nothing this backend can use would run the job as configured."""

    code = "no_executor"


@dataclass(frozen=True)
class Launch:
    """The process that runs one attempt of a job."""

    executor: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the worker environment
    processes: int = 1
    warm: bool = False  # one plain worker process on this machine: the warm worker may run it instead


@runtime_checkable
class Executor(Protocol):
    name: str

    def launch(self, row: Any) -> Launch:
        """The command line (and extra environment) that runs this job."""
        ...

    def status(self, proc: subprocess.Popen) -> int | None:
        """None while the run is alive, else the exit code the scheduler settles the job by."""
        ...

    def cancel(self, proc: subprocess.Popen, *, force: bool = False) -> None:
        """Ask the run to stop (force: end it now). The run tells a requested cancel from the backend going away
        by the job's `cancel_requested`, which the scheduler has set (or not) before calling this."""
        ...

    def reattach(self, row: Any, settings: BackendSettings) -> None:
        """After a backend restart, before the job is queued again: settle what this executor's earlier run of
        the job left behind (a no-op for a run it did not start)."""
        ...


class ExecutorChooser(Protocol):
    """The executors a backend has, and the one place that picks one for a job."""

    def for_job(self, row: Any) -> Executor:
        """The executor that runs this job; NoExecutorError when nothing here can."""
        ...

    def __iter__(self) -> Iterator[Executor]:
        ...
