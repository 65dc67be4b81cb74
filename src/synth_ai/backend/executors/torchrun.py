"""The `torchrun` executor: the job worker over N local processes (`python -m torch.distributed.run --standalone`),
or over N processes on each of several nodes (`backend serve --nnodes/--node-rank/--master-addr`, `torchrun_command`;
the other nodes join through `node_follower`).

SFT trains data-parallel (`synth_ai.backend.trainers.distributed`), RL runs data-parallel GSPO
(`synth_ai.backend.trainers.rl.data_parallel`). N is SYNTH_AI_BACKEND_TORCHRUN_NPROC when set; otherwise the job's
training GPUs (its `[compute].gpu_count`, or what its kind's `training_gpus` hook makes of it: an RL job's
topology may give some GPUs to the rollout engines, `rl.topology`), at most the GPUs present, and 1 on a machine
without GPUs. With N = 1 it starts one plain worker, as `local` does but cold.
"""

from __future__ import annotations

import os
from typing import Any

from synth_ai.backend.executors.placement import local_gpu_count, row_needs
from synth_ai.backend.executors.process_executor import ProcessExecutor, stop_leftover_worker, worker_argv
from synth_ai.backend.executors.torchrun_command import NodePlace, rank_env, record_launch, torchrun_argv
from synth_ai.backend.jobs.kinds import job_kind
from synth_ai.backend.jobs.launching import Launch
from synth_ai.backend.server_settings import BackendSettings
from synth_ai.backend.store.db import loads

TORCHRUN_NPROC_ENV = "SYNTH_AI_BACKEND_TORCHRUN_NPROC"


class TorchrunExecutor(ProcessExecutor):
    name = "torchrun"

    def launch(self, row: Any) -> Launch:
        nproc = training_ranks(row)
        place = NodePlace.from_env()
        if nproc == 1 and not place.multi_node:
            return Launch(self.name, worker_argv(row["id"]))
        if place.multi_node:  # the other nodes join this attempt from its record (`node_follower`)
            from synth_ai.env.paths import data_dir

            record_launch(BackendSettings(data_dir=data_dir()).job_dir(row["id"]), row["attempts"] + 1, place)
        return Launch(self.name, torchrun_argv(row["id"], nproc, place), rank_env(), nproc)

    def reattach(self, row: Any, settings: BackendSettings) -> None:
        """A launcher that outlived its backend is stopped, as a local worker is; the job resumes under a new one.
        Its pid is the job's worker_pid: rank 0 leaves that field to the launcher."""
        stop_leftover_worker(row, settings.cancel_grace_s, launcher=True)


def training_ranks(row: Any) -> int:
    """The ranks a job trains with on this machine: its kind's training GPUs of `[compute].gpu_count` (an RL
    topology may keep some for rollouts), at most the GPUs present (`torchrun_nproc`)."""
    kind = job_kind(row["kind"])
    spec = kind.spec_of(loads(row["payload"]) or {}, job_id=row["id"], model=row["model"])
    return torchrun_nproc(kind.gpus_that_train(spec, local_gpu_count(), row_needs(row).gpu_count))


def torchrun_nproc(needs_gpus: int) -> int:
    raw = os.environ.get(TORCHRUN_NPROC_ENV, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    gpus = local_gpu_count()
    return max(1, min(needs_gpus, gpus)) if gpus else 1
