"""The `torchrun` executor: the job worker over N local processes (`python -m torch.distributed.run --standalone`).

SFT trains data-parallel (`synth_ai.backend.trainers.distributed`), RL runs data-parallel GSPO
(`synth_ai.backend.trainers.rl.data_parallel`). N is SYNTH_AI_BACKEND_TORCHRUN_NPROC when set; otherwise the job's
training GPUs (an SFT job's `[compute].gpu_count`, an RL job's topology's training GPUs, `rl.topology`), at most the
GPUs present, and 1 on a machine without GPUs. With N = 1 it starts one plain worker, as `local` does but cold.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from synth_ai.backend.executors.placement import local_gpu_count, row_needs
from synth_ai.backend.executors.process_executor import (
    TORCHRUN_MODULE,
    ProcessExecutor,
    stop_leftover_worker,
    worker_argv,
)
from synth_ai.backend.jobs.launching import Launch
from synth_ai.backend.jobs.process_contract import WORKER_MODULE
from synth_ai.backend.server_settings import BackendSettings
from synth_ai.backend.store.db import loads
from synth_ai.errors import InvalidInputError

TORCHRUN_NPROC_ENV = "SYNTH_AI_BACKEND_TORCHRUN_NPROC"


class TorchrunExecutor(ProcessExecutor):
    name = "torchrun"

    def launch(self, row: Any) -> Launch:
        nproc = torchrun_nproc(_training_gpus(row["kind"], loads(row["payload"]) or {}, row_needs(row).gpu_count))
        if nproc == 1:
            return Launch(self.name, worker_argv(row["id"]))
        argv = [sys.executable, "-m", TORCHRUN_MODULE, "--standalone", f"--nproc-per-node={nproc}",
                "-m", WORKER_MODULE, row["id"]]
        # one CPU thread per rank unless told otherwise: N ranks share this machine's cores
        return Launch(self.name, argv, {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}, nproc)

    def reattach(self, row: Any, settings: BackendSettings) -> None:
        """A launcher that outlived its backend is stopped, as a local worker is; the job resumes under a new one.
        Its pid is the job's worker_pid: rank 0 leaves that field to the launcher."""
        stop_leftover_worker(row, settings.cancel_grace_s, launcher=True)


def torchrun_nproc(needs_gpus: int) -> int:
    raw = os.environ.get(TORCHRUN_NPROC_ENV, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    gpus = local_gpu_count()
    return max(1, min(needs_gpus, gpus)) if gpus else 1


def _training_gpus(kind: str, payload: Any, gpu_count: int) -> int:
    """GPUs that train: an RL job's topology may give some of [compute]'s GPUs to the rollout engines."""
    if kind != "rl" or not isinstance(payload, dict):
        return gpu_count
    from synth_ai.backend.trainers.rl.topology import topology_of, training_gpus

    try:
        return training_gpus(topology_of(payload), local_gpu_count(), gpu_count)
    except InvalidInputError:
        return gpu_count  # the worker refuses the topology with its message
