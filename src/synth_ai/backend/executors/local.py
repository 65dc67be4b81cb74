"""The `local` executor: one worker process on this machine (`python -m synth_ai.backend.jobs.worker <job_id>`),
which the warm worker may stand in for."""

from __future__ import annotations

from typing import Any

from synth_ai.backend.executors.process_executor import ProcessExecutor, stop_leftover_worker, worker_argv
from synth_ai.backend.jobs.launching import Launch
from synth_ai.backend.server_settings import BackendSettings


class LocalExecutor(ProcessExecutor):
    name = "local"

    def launch(self, row: Any) -> Launch:
        return Launch(self.name, worker_argv(row["id"]), warm=True)

    def reattach(self, row: Any, settings: BackendSettings) -> None:
        """A worker process that outlived its backend is stopped (it checkpoints; the job resumes in a new one).
        This covers every single worker process of the job: a cold or warm-started one, and torchrun's with one
        rank, which is a plain worker too."""
        stop_leftover_worker(row, settings.cancel_grace_s, launcher=False)
