"""Executors: how the scheduler runs a job. The job function (`synth_ai.backend.jobs.worker`) is the same for all of
them; they differ only in the process they start around it, how a stop reaches it and what a restart finds.

- `local` (local.py): one worker process on this machine (the warm worker may take it).
- `torchrun` (torchrun.py): the same worker over N local processes, data-parallel SFT and GSPO.
- `modal` (modal.py): a Modal GPU function built from the job (`modal_plan`), followed by a local relay process
  (`modal_relay`) that the scheduler starts where it would start a worker.

Each implements `synth_ai.backend.jobs.launching.Executor` (launch, status, cancel, reattach). `executor_for` is the
one place that picks one for a job: the backend's `--executor`, unless the job needs more than this machine has
(placement.py). `Executors` is what the API side hands the scheduler.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from synth_ai.backend.executors.local import LocalExecutor
from synth_ai.backend.executors.modal import ModalExecutor
from synth_ai.backend.executors.placement import choose, row_needs
from synth_ai.backend.executors.torchrun import TORCHRUN_NPROC_ENV, TorchrunExecutor, torchrun_nproc
from synth_ai.backend.jobs.launching import Executor, Launch, NoExecutorError
from synth_ai.backend.server_settings import EXECUTORS as EXECUTOR_NAMES

# one executor per name `--executor` accepts (server_settings.EXECUTORS), in the same order
REGISTRY: dict[str, Executor] = {executor.name: executor
                                 for executor in (LocalExecutor(), TorchrunExecutor(), ModalExecutor())}


def executor_for(backend_executor: str, row: Any) -> Executor:
    """The executor that runs this job under the backend's executor (or the one its needs require);
    NoExecutorError when nothing this backend can use would run it."""
    return REGISTRY[choose(backend_executor, row_needs(row))]


class Executors:
    """The chooser the scheduler is given (`jobs.launching.ExecutorChooser`) for a backend's `--executor`."""

    def __init__(self, backend_executor: str) -> None:
        self.backend_executor = backend_executor

    def for_job(self, row: Any) -> Executor:
        return executor_for(self.backend_executor, row)

    def __iter__(self) -> Iterator[Executor]:
        return iter(REGISTRY.values())


__all__ = ["EXECUTOR_NAMES", "REGISTRY", "TORCHRUN_NPROC_ENV", "Executor", "Executors", "Launch", "NoExecutorError",
           "executor_for", "torchrun_nproc"]
