"""Gradients summed across 2 gloo ranks bucket by bucket (`trainers.grad_buckets`, `DataParallel.sum_grads`): with
a bucket of a few dozen bytes (many buckets, tensors larger than a bucket, dtypes mixed, a transposed gradient, a
parameter without one) every gradient is exactly the sum of both ranks' and exactly what one bucket gives."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

# Each rank makes the same parameters with rank-dependent gradients, sums them with tiny and with default buckets,
# and checks both against the sum it computes itself from both ranks' gradients.
_RANKS = """
import sys
from pathlib import Path
import torch
from synth_ai.backend.trainers import distributed
from synth_ai.backend.trainers.grad_buckets import buckets

SHAPES = [((3, 5), torch.float32), ((7,), torch.float32), ((2, 2), torch.float64), ((40,), torch.float32),
          ((1,), torch.float64), ((4, 6), torch.float32), ((5,), torch.float32)]

def params(rank):
    out = []
    gen = torch.Generator().manual_seed(100 + rank)
    for i, (shape, dtype) in enumerate(SHAPES):
        p = torch.nn.Parameter(torch.zeros(shape, dtype=dtype))
        if i != 4:  # no gradient: counts as zeros
            g = torch.randn(shape, generator=gen, dtype=dtype)
            p.grad = g.t().contiguous().t() if i == 5 else g  # a transposed (non-contiguous) gradient
        out.append(p)
    return out

dp = distributed.current()
assert dp.world == 2
expected = [sum((p.grad if p.grad is not None else torch.zeros_like(p)) for p in ps)
            for ps in zip(params(0), params(1))]
tiny, whole = params(dp.rank), params(dp.rank)
assert not tiny[5].grad.is_contiguous()
assert len(buckets([p.grad for p in tiny if p.grad is not None], 64)) >= 6
dp.sum_grads(tiny, bucket_bytes=64)
dp.sum_grads(whole)
for i, (a, b, want) in enumerate(zip(tiny, whole, expected)):
    assert a.grad.dtype == want.dtype and a.grad.shape == want.shape, i
    assert torch.equal(a.grad, want), (i, a.grad, want)
    assert torch.equal(b.grad, want), i
Path(sys.argv[1], f"rank{dp.rank}.ok").write_text("ok")
torch.distributed.destroy_process_group()
"""


def test_buckets_group_consecutive_tensors_of_one_dtype_up_to_the_limit() -> None:
    import torch

    from synth_ai.backend.trainers.grad_buckets import buckets

    f32 = [torch.zeros(4), torch.zeros(4), torch.zeros(4), torch.zeros(20)]  # 16, 16, 16, 80 bytes
    sizes = [[t.numel() for t in b] for b in buckets([*f32, torch.zeros(2, dtype=torch.float64), torch.zeros(1)], 32)]
    assert sizes == [[4, 4], [4], [20], [2], [1]]
    assert [[t.numel() for t in b] for b in buckets(f32)] == [[4, 4, 4, 20]]


@pytest.mark.slow
def test_two_gloo_ranks_sum_gradients_exactly_in_tiny_buckets(tmp_path: Path) -> None:
    script = tmp_path / "ranks.py"
    script.write_text(_RANKS)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    done = subprocess.run([*launcher, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("*.ok")) == ["rank0.ok", "rank1.ok"]
