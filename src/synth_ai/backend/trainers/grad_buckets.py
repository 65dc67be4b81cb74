"""Summing gradients across ranks in buckets (`DataParallel.sum_grads`), never in one flat copy of them all.

Consecutive gradients of one dtype and device are grouped until a bucket would pass `BUCKET_BYTES` (25 MiB, the
size DDP uses by default). A bucket of one tensor is all-reduced in place; a bucket of several is copied into one
reused buffer (sized for the largest bucket of its dtype and device), all-reduced and copied back. So the transient
memory is one bucket, not a copy of every gradient, and each element is the same sum of the same rank values as
before (an element-wise sum does not depend on which other elements share its message).
"""

from __future__ import annotations

from typing import Any

BUCKET_BYTES = 25 * 1024 * 1024


def buckets(grads: list[Any], limit_bytes: int = BUCKET_BYTES) -> list[list[Any]]:
    """`grads` in order, grouped: consecutive tensors of one dtype and device whose sizes sum to at most
    `limit_bytes` (a tensor larger than that is a bucket of its own)."""
    out: list[list[Any]] = []
    size = 0
    for grad in grads:
        nbytes = grad.numel() * grad.element_size()
        last = out[-1] if out else None
        if (last is not None and last[0].dtype == grad.dtype and last[0].device == grad.device
                and size + nbytes <= limit_bytes):
            last.append(grad)
            size += nbytes
        else:
            out.append([grad])
            size = nbytes
    return out


def all_reduce_sum(grads: list[Any], limit_bytes: int = BUCKET_BYTES) -> None:
    """Sum each tensor of `grads` across the process group, in place, one all-reduce per bucket."""
    import torch
    import torch.distributed as dist

    groups = buckets(grads, limit_bytes)
    buffers: dict[tuple[Any, Any], torch.Tensor] = {}
    for group in groups:  # one buffer per dtype and device, as large as its largest shared bucket
        if len(group) > 1 or not group[0].is_contiguous():
            key = (group[0].dtype, group[0].device)
            need = sum(g.numel() for g in group)
            if key not in buffers or buffers[key].numel() < need:
                buffers[key] = torch.empty(need, dtype=key[0], device=key[1])
    for group in groups:
        if len(group) == 1 and group[0].is_contiguous():
            dist.all_reduce(group[0], op=dist.ReduceOp.SUM)
            continue
        flat = buffers[(group[0].dtype, group[0].device)][:sum(g.numel() for g in group)]
        offset = 0
        for grad in group:
            flat[offset:offset + grad.numel()].copy_(grad.reshape(-1))
            offset += grad.numel()
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for grad in group:
            grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
            offset += grad.numel()
