"""The rollout-engine choice for RL and the `[vllm]` settings handed to vLLM (no vLLM, no GPU needed)."""

from __future__ import annotations

import importlib.util

import pytest

from synth_ai.backend.trainers.rl.engine_choice import (
    DEFAULT_GPU_MEMORY,
    VllmOptions,
    choose_engine,
    llm_kwargs,
    vllm_options,
)
from synth_ai.errors import InvalidInputError, UnavailableError


def spec_with(vllm: dict | None) -> dict:
    config = {"algorithm": {"variety": "gspo"}}
    if vllm is not None:
        config["vllm"] = vllm
    return {"data": {"config": config}}


def test_vllm_settings_are_read_and_mapped():
    assert vllm_options(spec_with(None)) is None
    options = vllm_options(spec_with({"tensor_parallel_size": 2, "max_model_len": 8192,
                                      "gpu_memory_utilization": 0.6, "limit_mm_per_prompt": {"image": 3}}))
    assert options == VllmOptions(2, 8192, 0.6, {"image": 3})
    kwargs = llm_kwargs(options, "/models/qwen3-4b", seed=7, bf16=True)
    assert kwargs["tensor_parallel_size"] == 2 and kwargs["max_model_len"] == 8192
    assert kwargs["gpu_memory_utilization"] == 0.6 and kwargs["limit_mm_per_prompt"] == {"image": 3}
    assert kwargs["model"] == "/models/qwen3-4b" and kwargs["seed"] == 7 and kwargs["dtype"] == "bfloat16"
    assert kwargs["logprobs_mode"] == "processed_logprobs"  # GSPO's old log-probs: under the sampling distribution
    plain = llm_kwargs(vllm_options(spec_with({})), "/m", seed=0, bf16=False)
    assert plain["gpu_memory_utilization"] == DEFAULT_GPU_MEMORY and "max_model_len" not in plain
    assert "limit_mm_per_prompt" not in plain and plain["tensor_parallel_size"] == 1
    for bad, key in (({"tensor_parallel_size": 0}, "tensor_parallel_size"),
                     ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
                     ({"limit_mm_per_prompt": {"image": "two"}}, "limit_mm_per_prompt")):
        with pytest.raises(InvalidInputError, match=key):
            vllm_options(spec_with(bad))


def test_engine_choice():
    options = VllmOptions()
    assert choose_engine(options, cuda=True, installed=True, requested="auto")[0] == "vllm"
    name, why = choose_engine(options, cuda=False, installed=False, requested="auto")
    assert name == "builtin" and "a CUDA GPU and the vllm package" in why  # the CPU path keeps the built-in engine
    assert choose_engine(None, cuda=True, installed=True, requested="auto") == ("builtin",
                                                                                "the job has no [vllm] table")
    assert choose_engine(options, cuda=True, installed=True, requested="builtin")[0] == "builtin"
    with pytest.raises(UnavailableError) as caught:
        choose_engine(options, cuda=True, installed=False, requested="vllm")
    assert "the vllm package" in caught.value.message and "synth-ai[vllm]" in caught.value.hint
    with pytest.raises(InvalidInputError):
        choose_engine(options, cuda=True, installed=True, requested="sglang")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_importing_the_vllm_engine_without_vllm_says_how_to_install_it():
    with pytest.raises(UnavailableError) as caught:
        import synth_ai.backend.inference.vllm_engine  # noqa: F401
    assert "synth-ai[vllm]" in caught.value.hint
