"""FSDP sharding under torchrun, shared by SFT (`[hyperparameters.parallelism] fsdp = true`) and RL
(`[training] fsdp = true`, `rl.sharded_policy`).

PyTorch's own FSDP2 (`torch.distributed.fsdp.fully_shard`): each decoder layer is one shard group and a module
around the whole model is the root (SFT's loss, `sft.token_loss.SelectedTokenLoss`; RL's log-probs,
`rl.sharded_policy.CompletionLogprobs`), owning the embeddings, the final norm and the LM head
(tied to the embeddings on small Qwen3 models, so they must share a group). Every call goes through the root, so
the parameters outside the layers are gathered for the decoder *and* the LM head, and their gradients reduced.

What changes for the loop compared with plain data parallelism (`trainers.distributed`):
- gradients are reduce-scattered by FSDP as a *sum* (the loss is already divided by the step's global labelled
  token count), so N sharded ranks still compute exactly one process's update;
- every rank must run the same number of forward/backward passes (each is a collective): a rank with fewer
  micro-batches in a step runs a zero-weighted copy of one (`padded`); evaluation runs on every rank;
- checkpoints and the final model hold full tensors: the trainable tensors and the optimizer state are gathered
  to rank 0, written in the usual checkpoint layout, and scattered back on resume; the final model is rebuilt
  unsharded on rank 0 from the gathered tensors and saved as today, so inference loads it unchanged.

Strategies: `full_shard` (ZeRO-3: parameters re-sharded after each forward) and `shard_grad_op` (ZeRO-2: kept
gathered from forward to backward). Each rank reads the whole model into host memory before sharding it.
"""

from __future__ import annotations

from typing import Any

import torch

from synth_ai.backend.trainers.distributed import DataParallel


def shard(root: torch.nn.Module, layers: Any, dp: DataParallel, strategy: str) -> None:
    """Shard `layers` one group each, then `root` (the rest of the model); gradients are summed across ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cuda" if torch.cuda.is_available() else "cpu", (dp.world,))
    reshard = strategy == "full_shard"
    for layer in layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(root, mesh=mesh, reshard_after_forward=reshard)
    for module in root.modules():
        if hasattr(module, "set_gradient_divide_factor"):  # an FSDP group: sum, never average (see the loss)
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # gloo has no pre-multiplied sum


def padded(mine: list[Any], step_items: list[Any], dp: DataParallel) -> list[tuple[Any, float]]:
    """(micro-batch, weight) pairs: this rank's share of the step's micro-batches, then zero-weighted repeats of
    one until this rank runs as many passes as the rank with the most (they are dealt round-robin)."""
    most = -(-len(step_items) // dp.world)
    pairs = [(item, 1.0) for item in mine]
    filler = mine[0] if mine else step_items[0]
    while len(pairs) < most:
        pairs.append((filler, 0.0))
    return pairs


def full_tensors(named: dict[str, Any], dp: DataParallel) -> dict[str, torch.Tensor]:
    """Gather each (sharded) tensor whole; CPU copies on rank 0, an empty dict elsewhere. A collective."""
    out: dict[str, torch.Tensor] = {}
    for name, param in named.items():
        data = param.detach()
        whole = data.full_tensor() if hasattr(data, "full_tensor") else data
        if dp.main:
            out[name] = whole.cpu()
        del whole
    return out


def copy_full_into(named: dict[str, Any], targets: dict[str, torch.Tensor]) -> None:
    """Each (sharded) tensor of `named` gathered whole and copied into the same-named tensor of `targets` (an
    unsharded model's), one tensor at a time, on every rank. A collective."""
    with torch.no_grad():
        for name, param in named.items():
            data = param.detach()
            whole = data.full_tensor() if hasattr(data, "full_tensor") else data
            targets[name].copy_(whole.to(targets[name].dtype))
            del whole


def optimizer_state(root: torch.nn.Module, optimizer: Any) -> dict[str, Any]:
    """The optimizer's full state, keyed by parameter name (on rank 0; gathered from every rank)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(root, optimizer,
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def restore(root: torch.nn.Module, optimizer: Any, trainable: dict[str, Any], weights: dict[str, torch.Tensor],
            optimizer_state_dict: dict[str, Any]) -> None:
    """Load a checkpoint's full tensors into the sharded parameters and optimizer (every rank read the files)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
    from torch.distributed.tensor import distribute_tensor

    with torch.no_grad():
        for name, param in trainable.items():
            full = weights[name].to(param.device, param.dtype)
            if hasattr(param, "device_mesh"):
                full = distribute_tensor(full, param.device_mesh, param.placements)
            param.copy_(full)
    set_optimizer_state_dict(root, optimizer, optim_state_dict=optimizer_state_dict,
                             options=StateDictOptions(full_state_dict=True))


def unsharded_copy(fresh: torch.nn.Module, weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """`fresh` (the model as loaded and wrapped, before sharding) with the gathered trained tensors in it."""
    params = dict(fresh.named_parameters())
    missing = set(weights) - set(params)
    if missing:
        raise RuntimeError(f"the unsharded model lacks {sorted(missing)[:3]}... ({len(missing)} tensors)")
    with torch.no_grad():
        for name, tensor in weights.items():
            params[name].copy_(tensor.to(params[name].dtype))
    return fresh
