"""`[topology]` -> devices: how many training ranks an RL job runs under torchrun, and which GPU(s) each rank's
trainer and rollout engine use. Pure functions of (topology, GPUs present, rank, world): no torch here, so the
API process (the executor's launch) and the tests can call them.

The rule (docs/scale.md):

- no GPU: every rank trains and samples on the CPU;
- `gpus_for_vllm` absent or 0: colocated. Rank r trains on GPU r and its rollout engine shares that GPU (with
  `tensor_parallel` = t > 1, one process only: the engine spans GPUs 0..t-1, the trainer on GPU 0, as before);
- `gpus_for_vllm` = V > 0: split. Training ranks take GPUs 0..T-1 (T = `gpus_for_training`, else the GPUs left
  after V), the rollout engines the next V GPUs, `tensor_parallel` (t) of them per engine, one engine per rank:
  rank r's engine is GPUs T + r*t .. T + r*t + t - 1. So V must hold at least world x t GPUs.

`gpus_for_ref` is counted against the GPUs present; the reference model itself stays on its rank's trainer GPU.
Every refusal names the key to change.

`inference_devices` says when a rank's rollout engine runs in a separate inference process (issue 39, the split
topology): on GPUs whenever the split gives it GPUs of its own, on a CPU when `[topology].separate_inference =
true` asks for it; `separate_inference = false` keeps the engine in the trainer's process everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from synth_ai.config.job_specs import RLJobSpec
from synth_ai.errors import InvalidInputError


@dataclass(frozen=True)
class RankDevices:
    trainer: str  # "cpu" or "cuda:<i>"
    rollout: tuple[str, ...]  # the rollout engine's devices
    colocated: bool  # the rollout engine shares the trainer's device

    def describe(self) -> dict[str, Any]:
        return {"trainer": self.trainer, "rollout": list(self.rollout), "colocated": self.colocated}


def topology_of(spec: RLJobSpec | Mapping[str, Any]) -> dict[str, Any]:
    """The job's `[topology]` (or `[compute.topology]`) table from an RL spec or payload; {} when it has none."""
    return RLJobSpec.of(spec).topology


def _count(topology: dict[str, Any], key: str, default: int | None, minimum: int = 0) -> int | None:
    value = topology.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"[topology].{key} must be a whole number >= {minimum} (found {value!r}).")
    return value


def training_gpus(topology: dict[str, Any], gpus: int, gpu_count: int = 1) -> int:
    """How many ranks train an RL job under torchrun on a machine with `gpus` GPUs (`gpu_count`: the job's
    `[compute].gpu_count`, the colocated default)."""
    if gpus <= 0:
        return 1
    vllm = _count(topology, "gpus_for_vllm", 0) or 0
    ref = _count(topology, "gpus_for_ref", 0) or 0
    wanted = _count(topology, "gpus_for_training", None, minimum=1)
    room = gpus - vllm - ref if vllm else gpus
    if wanted is None:
        wanted = room if vllm else gpu_count
    return max(1, min(wanted, room))


def training_gpus_of(spec: RLJobSpec, local_gpus: int, gpu_count: int) -> int:
    """The RL kind's `training_gpus` hook (the torchrun executor's rank count): some of [compute]'s GPUs may go to
    the rollout engines. A topology this machine cannot give keeps `gpu_count`: the worker refuses it, with its
    message."""
    try:
        return training_gpus(RLJobSpec.of(spec).topology, local_gpus, gpu_count)
    except InvalidInputError:
        return gpu_count


def assign_devices(topology: dict[str, Any] | None, *, gpus: int, rank: int = 0, world: int = 1) -> RankDevices:
    """This rank's trainer and rollout-engine devices (see the module doc), or InvalidInputError saying what
    does not fit."""
    topology = topology or {}
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside a world of {world}")
    if gpus <= 0:
        return RankDevices("cpu", ("cpu",), True)
    tp = _count(topology, "tensor_parallel", 1, minimum=1) or 1
    vllm = _count(topology, "gpus_for_vllm", 0) or 0
    ref = _count(topology, "gpus_for_ref", 0) or 0
    train = _count(topology, "gpus_for_training", None, minimum=1)
    if not vllm:  # colocated
        train = train or world
        _fits(train + ref, gpus, "gpus_for_training")
        if world > train:
            raise InvalidInputError(
                f"{world} training ranks but [topology].gpus_for_training is {train}: each rank trains on its own "
                "GPU.", hint="Raise gpus_for_training or start fewer ranks (SYNTH_AI_BACKEND_TORCHRUN_NPROC).")
        if tp > 1 and world > 1:
            raise InvalidInputError(
                f"[topology].tensor_parallel = {tp} with the rollout engine colocated on {world} data-parallel "
                "ranks would put several engines on the same GPUs.",
                hint="Give the engines their own GPUs with [topology].gpus_for_vllm, or use tensor_parallel = 1.")
        _fits(tp, gpus, "tensor_parallel")
        rollout = tuple(f"cuda:{i}" for i in range(rank, rank + tp))
        return RankDevices(f"cuda:{rank}", rollout, True)
    train = train if train is not None else gpus - vllm - ref
    if train < 1:
        raise InvalidInputError(f"[topology].gpus_for_vllm = {vllm} leaves no GPU of the {gpus} present to train on.",
                                hint="Lower gpus_for_vllm, or set gpus_for_training on a machine with more GPUs.")
    _fits(train + vllm + ref, gpus, "gpus_for_vllm")
    if world > train:
        raise InvalidInputError(
            f"{world} training ranks but [topology].gpus_for_training is {train}: each rank trains on its own GPU.",
            hint="Raise gpus_for_training or start fewer ranks (SYNTH_AI_BACKEND_TORCHRUN_NPROC).")
    if vllm % tp:
        raise InvalidInputError(f"[topology].gpus_for_vllm = {vllm} is not a multiple of tensor_parallel = {tp}.",
                                hint="Give the rollout engines a multiple of tensor_parallel GPUs.")
    if vllm < world * tp:
        raise InvalidInputError(
            f"[topology].gpus_for_vllm = {vllm} gives {vllm // tp} rollout engine(s) of tensor_parallel = {tp} "
            f"GPU(s), and each of the {world} training ranks needs its own.",
            hint=f"Set gpus_for_vllm to at least {world * tp}, or start fewer ranks.")
    first = train + rank * tp
    return RankDevices(f"cuda:{rank}", tuple(f"cuda:{i}" for i in range(first, first + tp)), False)


def inference_devices(topology: dict[str, Any] | None, *, gpus: int, rank: int = 0,
                      world: int = 1) -> tuple[str, ...] | None:
    """The devices of this rank's separate inference process (see the module doc); None when its rollout engine
    stays in the trainer's process."""
    topology = topology or {}
    wanted = topology.get("separate_inference")
    if wanted is not None and not isinstance(wanted, bool):
        raise InvalidInputError(f"[topology].separate_inference must be true or false (found {wanted!r}).")
    if wanted is False:
        return None
    if gpus <= 0:
        return ("cpu",) if wanted else None
    try:
        devices = assign_devices(topology, gpus=gpus, rank=rank, world=world)
    except InvalidInputError:
        if world > 1:
            raise
        devices = assign_devices({}, gpus=gpus)  # one process: a topology for hosted hardware runs colocated here
    if devices.colocated and not wanted:
        return None
    return devices.rollout


def _fits(used: int, gpus: int, key: str) -> None:
    if used > gpus:
        raise InvalidInputError(f"The topology uses {used} GPUs and this machine has {gpus}.",
                                hint=f"Lower [topology].{key} (or the other gpus_for_* counts), or run on a machine "
                                     "with more GPUs.")
