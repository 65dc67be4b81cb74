"""Create-time checks of how an RL job spreads over its training ranks (`[training] fsdp`, issue 39 item 1).

- `refuse_unrunnable_sharding` (the job runs on this machine; `ranks` is what the backend's executor will start):
  FSDP needs at least 2 ranks, and its ranks must share the `batch_size` groups evenly (each rank samples whole
  groups; an uneven share would leave a sharded rank padding every step with passes that train nothing).
- `refuse_what_cannot_fit` (any job with a `[compute]` GPU type and a model the registry knows): the policy's
  training memory per GPU, estimated as the usual mixed-precision AdamW count — full: 16 bytes a parameter (fp32
  weights, gradients and the two moments) plus the rollout engine's bf16 sampling copy (2 bytes); LoRA: the bf16
  base (2 bytes) — against the GPU's memory less HEADROOM_GIB for activations and the KV cache. A data-parallel job
  that cannot fit one GPU is refused with the numbers and the fix (`[training] fsdp = true` over N GPUs when that
  fits, else more GPUs or LoRA); a sharded one that cannot fit either is refused the same way. An estimate, never
  measured on a GPU here (docs/scale.md).
"""

from __future__ import annotations

from typing import Any

from synth_ai.errors import InvalidInputError

GPU_MEMORY_GIB = {"T4": 16, "L4": 24, "A10G": 24, "A100": 40, "A100-40GB": 40, "A100-80GB": 80, "L40S": 48,
                  "H100": 80, "H200": 141, "B200": 180}
HEADROOM_GIB = 8.0  # activations of a micro-batch, the engine's KV cache, CUDA's own
FULL_BYTES, SAMPLING_BYTES, LORA_BASE_BYTES = 16, 2, 2
GIB = 1024 ** 3


def per_gpu_gib(params_b: float, mode: str, ranks: int, sharded: bool) -> float:
    """Estimated GiB a training rank holds (see the module doc)."""
    params = params_b * 1e9
    if mode == "lora":
        return params * LORA_BASE_BYTES / (ranks if sharded else 1) / GIB
    trained = params * FULL_BYTES / (ranks if sharded else 1)
    return (trained + (params * SAMPLING_BYTES if sharded else 0)) / GIB


def refuse_what_cannot_fit(model: str, mode: str, sharded: bool, compute: dict[str, Any], ranks: int) -> None:
    """InvalidInputError with the numbers and the fix when the policy cannot train on `ranks` GPUs of
    `[compute].gpu_type` (nothing is said when the GPU or the model's size is unknown)."""
    from synth_ai.models.registry import model_params_b

    gpu_type = compute.get("gpu_type") if isinstance(compute.get("gpu_type"), str) else None
    memory = GPU_MEMORY_GIB.get((gpu_type or "").upper())
    params_b = model_params_b(model)
    if memory is None or params_b is None:
        return
    room = memory - HEADROOM_GIB
    need = per_gpu_gib(params_b, mode, ranks, sharded)
    if need <= room:
        return
    what = f"{model} ({params_b:g}B, {mode})"
    if not sharded and ranks >= 2 and per_gpu_gib(params_b, mode, ranks, True) <= room:
        sharded_need = per_gpu_gib(params_b, mode, ranks, True)
        raise InvalidInputError(
            f"{what} needs about {need:.0f} GiB on each {gpu_type} ({memory} GiB, {room:.0f} usable) when every one "
            f"of the {ranks} training ranks holds the whole model: it does not fit.",
            hint=f"Set [training] fsdp = true: sharded over {ranks} ranks it needs about {sharded_need:.0f} GiB each.",
            details={"field": "data.config.training.fsdp"})
    fewest = next((n for n in range(max(2, ranks), 65) if per_gpu_gib(params_b, mode, n, True) <= room), None)
    fix = (f"Shard it over {fewest} or more GPUs ([compute].gpu_count, [training] fsdp = true)"
           if fewest else "Use a bigger GPU") + (", or train LoRA ([model].trainer_mode = \"lora\")."
                                                  if mode == "full" else ".")
    raise InvalidInputError(
        f"{what} needs about {need:.0f} GiB on each {gpu_type} ({memory} GiB, {room:.0f} usable) on {ranks} "
        f"training rank{'s' if ranks != 1 else ''}{' sharded' if sharded else ''}: it does not fit.",
        hint=fix, details={"field": "data.config.compute.gpu_count"})


def refuse_unrunnable_sharding(batch_size: int, sharded: bool, ranks: int, optimizer_states: str = "fp32") -> None:
    """InvalidInputError for FSDP on fewer than 2 ranks, over ranks that cannot share the groups evenly, or with
    optimiser states other than torch's AdamW (bitsandbytes' and the offloading optimiser do not take sharded
    parameters)."""
    if not sharded:
        return
    if optimizer_states != "fp32":
        raise InvalidInputError(
            f"[training].optimizer_states = {optimizer_states!r} does not run with [training].fsdp = true.",
            hint="Sharding already divides the optimiser states by the ranks: use optimizer_states = \"fp32\" "
                 "(the default) with fsdp, or drop fsdp.",
            details={"field": "data.config.training.optimizer_states"})
    if ranks < 2:
        raise InvalidInputError(
            f"[training].fsdp = true shards the policy over torchrun ranks, but this job would run as {ranks} "
            "process.",
            hint="Serve the backend with `synth-ai backend serve --executor torchrun` and give the job 2 or more "
                 "ranks ([compute].gpu_count on GPUs, SYNTH_AI_BACKEND_TORCHRUN_NPROC on a CPU), or remove "
                 "[training].fsdp.",
            details={"field": "data.config.training.fsdp"})
    if batch_size % ranks:
        raise InvalidInputError(
            f"[training].batch_size = {batch_size} groups cannot be shared evenly by {ranks} sharded ranks.",
            hint=f"Use a batch_size that is a multiple of {ranks}.",
            details={"field": "data.config.training.batch_size"})
