"""The rollout-engine choice for RL, the `[vllm]` settings handed to vLLM and the create-time refusals (no vLLM, no
GPU needed: `installed` and `gpus` are given)."""

from __future__ import annotations

import importlib.util

import pytest

from synth_ai.backend.inference.vllm_options import (
    DEFAULT_CPU_KV_CACHE_BYTES,
    cpu_attention_head_sizes,
)
from synth_ai.backend.trainers.rl.engine_choice import (
    DEFAULT_GPU_MEMORY,
    VllmOptions,
    choose_engine,
    llm_kwargs,
    refuse_unrunnable_vllm,
    vllm_options,
)
from synth_ai.env.extras import pip_install
from synth_ai.errors import InvalidInputError, UnavailableError


def spec_with(vllm: dict | None) -> dict:
    config = {"algorithm": {"variety": "gspo"}}
    if vllm is not None:
        config["vllm"] = vllm
    return {"data": {"config": config}}


def test_vllm_settings_are_read_and_mapped():
    assert vllm_options(spec_with(None)) is None
    options = vllm_options(spec_with({"tensor_parallel_size": 2, "max_model_len": 8192,
                                      "gpu_memory_utilization": 0.6, "limit_mm_per_prompt": {"image": 3},
                                      "kv_cache_memory_bytes": 2 ** 30}))
    assert options == VllmOptions(2, 8192, 0.6, {"image": 3}, 2 ** 30)
    kwargs = llm_kwargs(options, "/models/qwen3-4b", seed=7, bf16=True)
    assert kwargs["tensor_parallel_size"] == 2 and kwargs["max_model_len"] == 8192
    assert kwargs["gpu_memory_utilization"] == 0.6 and kwargs["limit_mm_per_prompt"] == {"image": 3}
    assert kwargs["model"] == "/models/qwen3-4b" and kwargs["seed"] == 7 and kwargs["dtype"] == "bfloat16"
    assert kwargs["logprobs_mode"] == "processed_logprobs"  # after temperature: what the trainer recomputes
    assert kwargs["kv_cache_memory_bytes"] == 2 ** 30 and "enforce_eager" not in kwargs
    plain = llm_kwargs(vllm_options(spec_with({})), "/m", seed=0, bf16=False)
    assert plain["gpu_memory_utilization"] == DEFAULT_GPU_MEMORY and "max_model_len" not in plain
    assert "limit_mm_per_prompt" not in plain and plain["tensor_parallel_size"] == 1
    assert "kv_cache_memory_bytes" not in plain  # on a GPU: the memory fraction sizes the cache
    on_cpu = llm_kwargs(vllm_options(spec_with({})), "/m", seed=0, bf16=False, cpu=True)
    assert on_cpu["kv_cache_memory_bytes"] == DEFAULT_CPU_KV_CACHE_BYTES and on_cpu["enforce_eager"] is True
    for bad, key in (({"tensor_parallel_size": 0}, "tensor_parallel_size"),
                     ({"kv_cache_memory_bytes": -1}, "kv_cache_memory_bytes"),
                     ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
                     ({"limit_mm_per_prompt": {"image": "two"}}, "limit_mm_per_prompt")):
        with pytest.raises(InvalidInputError, match=key):
            vllm_options(spec_with(bad))


def test_engine_choice():
    options = VllmOptions()
    assert choose_engine(options, installed=True, requested="auto") == ("vllm", "the job has a [vllm] table")
    assert choose_engine(None, installed=True, requested="auto") == ("builtin", "the job has no [vllm] table")
    assert choose_engine(None, installed=False, requested="auto")[0] == "builtin"  # no [vllm]: vLLM not needed
    assert choose_engine(options, installed=False, requested="builtin")[0] == "builtin"
    assert choose_engine(None, installed=True, requested="vllm")[0] == "vllm"
    assert choose_engine(options, installed=True, requested="auto", ranks=2)[0] == "builtin"
    for requested in ("auto", "vllm"):  # a [vllm] job (or the variable) where vLLM is missing: how to install it
        with pytest.raises(UnavailableError) as caught:
            choose_engine(options, installed=False, requested=requested)
        assert "the vllm package is not installed" in caught.value.message
        assert "./scripts/bootstrap.sh --vllm" in caught.value.hint and pip_install("vllm") in caught.value.hint
    with pytest.raises(InvalidInputError):
        choose_engine(options, installed=True, requested="sglang")


def test_create_time_refusals(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SYNTH_AI_ROLLOUT_ENGINE", raising=False)
    job = spec_with({"tensor_parallel_size": 1})
    with pytest.raises(UnavailableError, match="not installed") as caught:
        refuse_unrunnable_vllm(job, {"head_dim": 64}, gpus=0, installed=False)
    assert "./scripts/bootstrap.sh --vllm" in caught.value.hint
    refuse_unrunnable_vllm(spec_with(None), {"head_dim": 16}, gpus=0, installed=False)  # no [vllm]: nothing to do
    refuse_unrunnable_vllm(job, {"head_dim": 64}, gpus=0, installed=True)
    refuse_unrunnable_vllm(job, None, gpus=0, installed=True)  # a model not here: its own check speaks
    refuse_unrunnable_vllm(job, {"head_dim": 16}, gpus=1, installed=True)  # a GPU's attention is not the CPU's
    with pytest.raises(InvalidInputError, match="head_dim=16") as caught:
        refuse_unrunnable_vllm(job, {"hidden_size": 64, "num_attention_heads": 4}, gpus=0, installed=True)
    assert "synth-ai/tiny-qwen3-hd64" in caught.value.hint and 64 in cpu_attention_head_sizes()
    with pytest.raises(InvalidInputError, match="tensor_parallel_size = 4, but this machine has 2 GPUs"):
        refuse_unrunnable_vllm(spec_with({"tensor_parallel_size": 4}), None, gpus=2, installed=True)
    monkeypatch.setenv("SYNTH_AI_ROLLOUT_ENGINE", "builtin")  # the documented way past all of it
    refuse_unrunnable_vllm(job, {"head_dim": 16}, gpus=0, installed=False)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_importing_the_vllm_engine_without_vllm_says_how_to_install_it():
    with pytest.raises(UnavailableError) as caught:
        import synth_ai.backend.inference.vllm_engine  # noqa: F401
    assert pip_install("vllm") in caught.value.hint and "./scripts/bootstrap.sh --vllm" in caught.value.hint
