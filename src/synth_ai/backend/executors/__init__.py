"""Executors: how the scheduler starts a job's worker. The job function (`synth_ai.backend.jobs.worker`) is the same
for all of them; they differ only in the process they launch around it.

- `local`: one worker process on this machine (the warm worker may take it).
- `torchrun`: the same worker over N local processes (`python -m torch.distributed.run`), data-parallel SFT
  (`synth_ai.backend.trainers.distributed`); N is the job's GPU count on a GPU machine, else
  SYNTH_AI_BACKEND_TORCHRUN_NPROC (CPU processes with gloo); data-parallel GSPO for RL jobs
  (`synth_ai.backend.trainers.rl.data_parallel`), N the topology's training GPUs (`rl.topology`).
- `modal`: a Modal GPU function built from the job (`modal_plan`), submitted and followed by a local relay
  process (`modal_relay`) that the scheduler starts where it would start a worker.

`launch_for(settings, row)` answers which one runs a job and the command line to start; placement.py decides.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from synth_ai.backend.store.db import loads
from synth_ai.backend.executors.placement import NoExecutorError, choose, job_needs, local_gpu_count
from synth_ai.errors import InvalidInputError

TORCHRUN_NPROC_ENV = "SYNTH_AI_BACKEND_TORCHRUN_NPROC"
WORKER_MODULE = "synth_ai.backend.jobs.worker"


@dataclass(frozen=True)
class Launch:
    executor: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the worker environment
    processes: int = 1


def torchrun_nproc(needs_gpus: int) -> int:
    raw = os.environ.get(TORCHRUN_NPROC_ENV, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    gpus = local_gpu_count()
    return max(1, min(needs_gpus, gpus)) if gpus else 1


def launch_for(executor: str, row: Any) -> Launch:
    """The command that runs this job under the backend's executor (or the one its needs require)."""
    payload = loads(row["payload"]) or {}
    needs = job_needs(row["kind"], row["model"], payload if isinstance(payload, dict) else {})
    chosen = choose(executor, needs)
    job_id = row["id"]
    if chosen == "modal":  # a local relay process submits the job and streams it back (executors.modal_relay)
        return Launch("modal", [sys.executable, "-m", "synth_ai.backend.executors.modal_relay", job_id])
    nproc = torchrun_nproc(_training_gpus(row["kind"], payload, needs.gpu_count)) if chosen == "torchrun" else 1
    if nproc > 1:
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                "-m", WORKER_MODULE, job_id]
        # one CPU thread per rank unless told otherwise: N ranks share this machine's cores
        return Launch("torchrun", argv, {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}, nproc)
    return Launch("local" if chosen != "torchrun" else "torchrun", [sys.executable, "-m", WORKER_MODULE, job_id])


def _training_gpus(kind: str, payload: Any, gpu_count: int) -> int:
    """GPUs that train: an RL job's topology may give some of [compute]'s GPUs to the rollout engines."""
    if kind != "rl" or not isinstance(payload, dict):
        return gpu_count
    from synth_ai.backend.trainers.rl.topology import topology_of, training_gpus

    try:
        return training_gpus(topology_of(payload), local_gpu_count(), gpu_count)
    except InvalidInputError:
        return gpu_count  # the worker refuses the topology with its message


__all__ = ["Launch", "NoExecutorError", "launch_for", "torchrun_nproc"]
