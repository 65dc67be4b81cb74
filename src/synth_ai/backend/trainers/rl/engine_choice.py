"""Which rollout engine serves the policy during RL: the built-in engine (`LocalPolicyServer`) or vLLM
(`synth_ai.backend.inference.vllm_engine`), and the `[vllm]` settings it gets.

SYNTH_AI_ROLLOUT_ENGINE picks: `auto` (default) uses vLLM when the job has a `[vllm]` table, a CUDA GPU is present
and the `vllm` package is installed (the `vllm` extra; the Modal image of an RL job has it), else the built-in
engine; `builtin` always uses the built-in engine; `vllm` insists, and says what is missing. CPU jobs (and the
tests) therefore keep the built-in engine, whose behaviour is unchanged.

Both engines share the trainer's process and GPU (colocated): vLLM gets `gpu_memory_utilization` of it (default
DEFAULT_GPU_MEMORY, leaving the rest to the trainer) and the trainer's weights every `weight_sync_interval`
iterations, copied in memory. `[topology]` GPU counts size the job (`[compute]`), see docs/scale.md. Under
torchrun each rank builds its own engine; a job of several ranks samples with the built-in engine (vLLM inside a
data-parallel job is not done).
"""

from __future__ import annotations

import os
from typing import Any

from synth_ai.backend.inference.vllm_options import (  # noqa: F401 - llm_kwargs re-exported
    DEFAULT_GPU_MEMORY,
    VLLM_INSTALL_HINT,
    VllmOptions,
    llm_kwargs,
    vllm_installed,
)
from synth_ai.errors import InvalidInputError, UnavailableError

ENGINE_ENV = "SYNTH_AI_ROLLOUT_ENGINE"
ENGINES = ("auto", "builtin", "vllm")
def vllm_options(spec: dict[str, Any]) -> VllmOptions | None:
    """The job's `[vllm]` table (None when it has none), checked."""
    data = spec.get("data") if isinstance(spec.get("data"), dict) else {}
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    table = config.get("vllm")
    if not isinstance(table, dict):
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
                       limit_mm_per_prompt=dict(limits) if limits else None)


def choose_engine(options: VllmOptions | None, *, cuda: bool, installed: bool, requested: str | None = None,
                  ranks: int = 1) -> tuple[str, str]:
    """("vllm" | "builtin", why) for a job (`ranks`: its data-parallel torchrun ranks)."""
    wanted = (requested if requested is not None else os.environ.get(ENGINE_ENV, "auto")).strip().lower() or "auto"
    if wanted not in ENGINES:
        raise InvalidInputError(f"{ENGINE_ENV}={wanted!r} is not a rollout engine.",
                                hint=f"Use one of: {', '.join(ENGINES)}.")
    if wanted == "builtin":
        return "builtin", f"{ENGINE_ENV}=builtin"
    missing = [what for what, ok in (("a CUDA GPU", cuda), ("the vllm package", installed)) if not ok]
    if ranks > 1:  # an in-process vllm.LLM per rank inside torchrun's process group is not done (docs/scale.md)
        if wanted == "vllm":
            raise UnavailableError(f"{ENGINE_ENV}=vllm, but the vLLM engine does not run in a data-parallel job "
                                   f"({ranks} torchrun ranks) yet.",
                                   hint="Use SYNTH_AI_ROLLOUT_ENGINE=builtin, or one rank "
                                        "(SYNTH_AI_BACKEND_TORCHRUN_NPROC=1) for vLLM rollouts.")
        return "builtin", f"data-parallel job ({ranks} ranks): each rank samples with the built-in engine"
    if wanted == "vllm":
        if missing:
            raise UnavailableError(f"{ENGINE_ENV}=vllm, but this machine lacks {' and '.join(missing)}.",
                                   hint=VLLM_INSTALL_HINT)
        return "vllm", f"{ENGINE_ENV}=vllm"
    if options is None:
        return "builtin", "the job has no [vllm] table"
    if missing:
        return "builtin", f"[vllm] is set but this machine lacks {' and '.join(missing)}"
    return "vllm", "[vllm] is set, a CUDA GPU and vllm are present"


def build_rollout_engine(settings: Any, trainer: Any, spec: dict[str, Any], reporter: Any, *, ranks: int = 1) -> Any:
    """The engine the RL loop samples through (see the module doc); each torchrun rank builds its own."""
    from synth_ai.backend.inference.policy_server import LocalPolicyServer

    options = vllm_options(spec)
    name, why = choose_engine(options, cuda=trainer.where.device == "cuda", installed=vllm_installed(), ranks=ranks)
    reporter.event("rl.rollout_engine", f"Rollouts are sampled by the {name} engine ({why}).",
                   {"engine": name, "reason": why,
                    **({"vllm": options.__dict__} if name == "vllm" and options is not None else {})})
    common = {"seed": settings.seed, "max_images": settings.max_images_per_step,
              "cid_prefix": f"{settings.job_id}-"}
    if name == "vllm":
        from synth_ai.backend.inference.vllm_engine import VllmPolicyServer

        return VllmPolicyServer(trainer.served(), options or VllmOptions(), bf16=trainer.use_bf16, **common)
    return LocalPolicyServer(trainer.served(), share_weights=settings.weight_sync_interval == 1, **common)
