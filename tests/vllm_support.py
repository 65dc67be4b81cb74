"""What the vLLM tests share: in-process engine settings for this CPU machine and a small Qwen3 that vLLM's CPU
attention runs (head_dim 64; the project's tiny model has 16, which it refuses), built deterministically from the
project's tokenizer recipe. Random weights: the tests compare what is sampled, not its quality."""

from __future__ import annotations

import os
from pathlib import Path

# vLLM in this process (no spawned engine core), a small KV cache; set before vllm is imported
VLLM_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}


def use_vllm_env() -> None:
    for key, value in VLLM_ENV.items():
        os.environ.setdefault(key, value)


def build_head64_qwen3(folder: Path) -> Path:
    """A 2-layer Qwen3 (hidden 128, 2 heads of 64, 1 KV head) with the project's tokenizer, saved to `folder`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from synth_ai.backend.ml.tiny import TinyRecipe, generation_config_for, special_token_ids, train_tokenizer

    tokenizer = train_tokenizer(TinyRecipe(tokenizer_conversations=300))
    config = Qwen3Config(vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=2048,
                         tie_word_embeddings=True, initializer_range=0.2,
                         **special_token_ids(tokenizer))  # peaked logits: a change of weights shows in samples
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    model.generation_config = generation_config_for(tokenizer)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
