"""Data-parallel GSPO under torchrun: how N ranks share an iteration and stay in step.

Every rank runs the same loop with its own policy (identical weights) and its own rollout engine (its own port on
127.0.0.1; the task app gets that rank's inference_url). Per iteration:

- rollouts: the iteration's groups (a seed's `group_size` rollouts) are dealt to the ranks, whole groups only,
  group i to rank i mod N (`local_jobs`); each rank runs its share, then every rank gets every rollout back in the
  iteration's order (`run_rollouts`: one all-gather of the results). Sampling is seeded per rollout id and call
  (`policy_server`), so a rollout samples the same tokens whichever rank runs it;
- rewards, advantages, the judge (rank 0 judges, then shares the judged rollouts) and the iteration's metrics are
  then computed from the same list on every rank, so every decision (skip, fail, stop) is the same everywhere;
- the GSPO update: each optimiser step's samples are dealt to the ranks, each rank divides its loss by the step's
  *global* sample count and the gradients are summed by bucketed all-reduces (`distributed.DataParallel.sum_grads`)
  before clipping: exactly the update one process computes over the same samples (`step.GSPOTrainer.train`);
- a stop (cancel, shutdown, a cancel seen mid-rollouts) is agreed by all ranks (`DataParallel.any`).

Rank 0 alone reports, checkpoints, evaluates' events and saves the final model; every rank reads the same
checkpoint when the job resumes. Outside torchrun everything here is the single-process path.
"""

from __future__ import annotations

from typing import Any

from synth_ai.backend.trainers.distributed import DataParallel
from synth_ai.backend.trainers.rl.rollouts import RolloutsStopped
from synth_ai.backend.trainers.rl.types import Rollout
from synth_ai.config.job_specs import RLJobSpec


def local_jobs(jobs: list[tuple[int, int, str]], dp: DataParallel) -> list[tuple[int, int, str]]:
    """This rank's (seed, member, cid) jobs: whole groups (same seed), group i to rank i mod world."""
    if not dp.enabled:
        return jobs
    order: dict[int, int] = {}
    for seed, _member, _cid in jobs:
        order.setdefault(seed, len(order))
    return [job for job in jobs if order[job[0]] % dp.world == dp.rank]


def run_rollouts(runner: Any, jobs: list[tuple[int, int, str]], dp: DataParallel, *, mode: str,
                 extra_policy: dict[str, Any] | None = None) -> list[Rollout]:
    """Every rollout of `jobs`, in their order, on every rank; this rank ran its share. RolloutsStopped on every
    rank when any rank was stopped."""
    return combine_rollouts(jobs, dp, *run_local_share(runner, jobs, dp, mode=mode, extra_policy=extra_policy))


def run_local_share(runner: Any, jobs: list[tuple[int, int, str]], dp: DataParallel, *, mode: str,
                    extra_policy: dict[str, Any] | None = None) -> tuple[list[Rollout], bool]:
    """This rank's share of `jobs` run (no collective call: any thread may run it), and whether it was stopped.
    Outside torchrun a stop raises RolloutsStopped at once."""
    if not dp.enabled:
        return runner.run(jobs, mode=mode, extra_policy=extra_policy), False
    mine = local_jobs(jobs, dp)
    try:
        return (runner.run(mine, mode=mode, extra_policy=extra_policy) if mine else []), False
    except RolloutsStopped:
        return [], True


def combine_rollouts(jobs: list[tuple[int, int, str]], dp: DataParallel, results: list[Rollout],
                     stopped: bool) -> list[Rollout]:
    """Every rank's share of `jobs` in their order (one all-gather, from the loop's thread)."""
    if not dp.enabled:
        return results
    if dp.any(stopped):
        raise RolloutsStopped()
    by_cid = {r.cid: r for part in gather(dp, results) for r in part}
    return [by_cid[cid] for _seed, _member, cid in jobs]


def gather(dp: DataParallel, value: Any) -> list[Any]:
    """Every rank's `value`, in rank order, on every rank."""
    if not dp.enabled:
        return [value]
    import torch.distributed as dist

    out: list[Any] = [None] * dp.world
    dist.all_gather_object(out, value)
    return out


def from_main(dp: DataParallel, value: Any) -> Any:
    """Rank 0's `value`, on every rank."""
    if not dp.enabled:
        return value
    import torch.distributed as dist

    box = [value if dp.main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def sum_values(dp: DataParallel, values: list[float]) -> list[float]:
    """Element-wise sums over the ranks, in one all-reduce."""
    if not dp.enabled:
        return list(values)
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return [float(v) for v in tensor.tolist()]


def place_rank(spec: RLJobSpec, dp: DataParallel) -> Any:
    """This rank's devices from the job's `[topology]` (`topology.assign_devices`); makes the trainer's GPU the
    current CUDA device."""
    import torch

    from synth_ai.backend.trainers.rl.topology import assign_devices, topology_of
    from synth_ai.errors import InvalidInputError

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    try:
        devices = assign_devices(topology_of(spec), gpus=gpus, rank=dp.rank, world=dp.world)
    except InvalidInputError:
        if dp.enabled:
            raise
        # one process: a topology written for hosted hardware runs colocated here, as it always did
        devices = assign_devices({}, gpus=gpus)
    if devices.trainer.startswith("cuda:"):
        torch.cuda.set_device(int(devices.trainer.split(":")[1]))
    return devices
