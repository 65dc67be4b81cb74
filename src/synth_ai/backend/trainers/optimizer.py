"""The AdamW optimiser of SFT and RL, built in one place: the kernel (fused where torch has one for the tensors) and
where its two moment states live (`optimizer_states`).

- `fp32` (default): `torch.optim.AdamW`, states in fp32 beside the weights. Fused (one kernel over every tensor) on
  CUDA, and on the CPU too (a 34M-parameter SFT step took 0.05 s fused against 0.2 s foreach); FSDP's sharded
  tensors on the CPU keep foreach.
- `8bit`: bitsandbytes' `AdamW8bit`, block-wise 8-bit states (2 bytes a parameter instead of 8), on CUDA or CPU.
- `cpu_offload`: torchao's `CPUOffloadOptimizer`, states and the step on the CPU, weights and gradients on the GPU
  (a CUDA GPU is needed: on the CPU the states are in host memory already).

Both libraries are the `optim` extra, imported only when asked for. `optimizer_refusal` says why a choice cannot
run where the job runs (library missing, no CUDA GPU) with the fix; the RL kind refuses it at create time
(`rl.local_check`) and `build_adamw` raises the same refusal when a worker finds it (a job run elsewhere).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any

from synth_ai.env.extras import pip_install
from synth_ai.errors import UnavailableError

OPTIMIZER_STATES = ("fp32", "8bit", "cpu_offload")
DEFAULT_OPTIMIZER_STATES = "fp32"
BETAS = (0.9, 0.999)
EPS = 1e-8
_LIBRARY = {"8bit": ("bitsandbytes", "bitsandbytes' AdamW8bit"),
            "cpu_offload": ("torchao", "torchao's CPUOffloadOptimizer")}


def optimizer_refusal(states: str, *, cuda: bool, key: str = "[training].optimizer_states"
                      ) -> tuple[str, str] | None:
    """(message, fix) when `states` cannot run here (`cuda`: the job trains on a CUDA GPU); None when it can."""
    if states == "fp32":
        return None
    module, what = _LIBRARY[states]
    if states == "cpu_offload" and not cuda:
        return (f'{key} = "cpu_offload" moves the optimiser states off a CUDA GPU, but this job trains on the CPU '
                "(its states are in host memory already).",
                f'Use {key} = "8bit" to shrink them, or "fp32"; or run the job on a CUDA GPU.')
    if importlib.util.find_spec(module) is None:
        return (f'{key} = "{states}" needs {what}, and the {module} package is not installed in the backend\'s '
                "environment.",
                f'Install the optim extra ({pip_install("optim")}) and restart the backend, or use {key} = "fp32".')
    return None


def build_adamw(params: Iterable[Any], *, lr: float, weight_decay: float, device: str, states: str = "fp32",
                sharded: bool = False) -> Any:
    """AdamW over `params` (see the module doc); `sharded`: FSDP's DTensors, which have no fused CPU kernel."""
    import torch

    params = list(params)
    refusal = optimizer_refusal(states, cuda=device == "cuda")
    if refusal is not None:
        message, fix = refusal
        raise UnavailableError(message, hint=fix)
    if states == "8bit":
        import bitsandbytes

        # min_8bit_size=0: small tensors (norms, tiny models) take 8-bit states too, so the choice is visible
        return bitsandbytes.optim.AdamW8bit(params, lr=lr, betas=BETAS, eps=EPS, weight_decay=weight_decay,
                                            min_8bit_size=0)
    if states == "cpu_offload":
        from torchao.optim import CPUOffloadOptimizer

        return CPUOffloadOptimizer(params, torch.optim.AdamW, lr=lr, betas=BETAS, eps=EPS,
                                   weight_decay=weight_decay, fused=True)
    fused = device == "cuda" or not sharded
    return torch.optim.AdamW(params, lr=lr, betas=BETAS, eps=EPS, weight_decay=weight_decay,
                             **({"fused": True} if fused else {"foreach": True}))
