"""Data-parallel training when the worker runs under torchrun (the `torchrun` executor).

torchrun starts N copies of the job worker with RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR set. Each rank runs
the same trainer loop on its share of every optimizer step's micro-batches (`shard`); after the backward pass the
gradients are summed across ranks by bucketed all-reduces (`sum_grads`, `grad_buckets`), and because each rank
divides its loss by the step's *global* labelled-token count, the summed gradient is exactly the one a single
process computes over all the micro-batches. Only rank 0 reports, checkpoints and saves the final model.

Why not wrap the model in `DistributedDataParallel`: the SFT loop runs the decoder and the LM head separately (to
skip a full-vocabulary logits tensor), and DDP only synchronises gradients for a forward through its wrapper.

Backend: NCCL with one CUDA device per local rank when there are GPUs, gloo on CPU (how the tests run it).
Outside torchrun (`WORLD_SIZE` unset or 1) everything here is a no-op, so the single-process path is unchanged.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DataParallel:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def shard(self, items: list[Any]) -> list[Any]:
        """This rank's items of a step: every world-th one, starting at its rank."""
        return items[self.rank::self.world] if self.enabled else items

    def sum(self, value: float) -> float:
        if not self.enabled:
            return value
        import torch
        import torch.distributed as dist

        tensor = torch.tensor([float(value)], dtype=torch.float64, device=_device(self))
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return float(tensor.item())

    def any(self, flag: bool) -> bool:
        """True on every rank when one rank says True (a stop must happen at the same step everywhere)."""
        return self.sum(1.0 if flag else 0.0) > 0 if self.enabled else flag

    def sum_grads(self, params: list[Any], bucket_bytes: int | None = None) -> None:
        """Sum the gradients of `params` across ranks, in place, bucket by bucket (`grad_buckets`); a rank with no
        micro-batch this step adds 0."""
        if not self.enabled:
            return
        import torch

        from synth_ai.backend.trainers.grad_buckets import BUCKET_BYTES, all_reduce_sum

        for param in params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        all_reduce_sum([p.grad for p in params], BUCKET_BYTES if bucket_bytes is None else bucket_bytes)

    def barrier(self) -> None:
        if self.enabled:
            import torch.distributed as dist

            dist.barrier()


_current: DataParallel | None = None


def current() -> DataParallel:
    """This process's place in the job: joins the process group on first use under torchrun."""
    global _current
    if _current is None:
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if world <= 1:
            _current = DataParallel()
        else:
            _current = _join(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))
    return _current


def _join(rank: int, world: int, local_rank: int) -> DataParallel:
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo", rank=rank, world_size=world)
        atexit.register(_leave)
    return DataParallel(rank=rank, world=world, local_rank=local_rank)


def _leave() -> None:
    """Tear the process group down while the interpreter is still whole. Left to interpreter shutdown, a gloo
    rank that finished first (the others still writing a checkpoint) could die in C++ ("terminate called without
    an active exception", SIGABRT), and torchrun then failed the whole job. Local: no collective, so a rank never
    waits here on a peer that crashed."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _device(dp: DataParallel) -> Any:
    import torch

    return torch.device("cuda", dp.local_rank) if torch.cuda.is_available() else torch.device("cpu")


def rank_from_env() -> tuple[int, int]:
    """(rank, world size) as torchrun set them, without importing torch (the worker decides who reports)."""
    try:
        return int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)
    except ValueError:
        return 0, 1
