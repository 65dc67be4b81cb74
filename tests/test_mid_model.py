"""The mid-size bench model `synth-ai/random-qwen3-34m`: a deterministic build, the shape it claims, its own id in
the model store and the registry."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from synth_ai.backend.store.model_store import ModelStore

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_mid_build_is_deterministic(tmp_path: Path) -> None:
    from synth_ai.backend.ml import mid
    from synth_ai.backend.ml.tiny import weights_digest

    recipe = mid.MidRecipe(vocab_size=1024, lexicon_words=2000, tokenizer_paragraphs=400, tokenizer_conversations=100,
                           hidden_size=64, intermediate_size=128, layers=2, heads=4, kv_heads=2, head_dim=16)
    mid.build_mid_text(tmp_path / "a", recipe)
    mid.build_mid_text(tmp_path / "b", recipe)
    assert weights_digest(tmp_path / "a") == weights_digest(tmp_path / "b")
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()


def test_mid_model_has_the_size_and_id_it_claims(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from synth_ai.backend.ml import loading
    from synth_ai.backend.ml.mid import mid_prose
    from synth_ai.models.registry import find_model

    store = ModelStore(tmp_path / "data")
    listed = {m["id"]: m for m in store.list_models()}
    assert listed["synth-ai/random-qwen3-34m"]["status"] == "builds_on_first_use"
    path = store.resolve("SYNTH-AI/Random-Qwen3-34M")  # ids are case-insensitive
    assert path.parent == tmp_path / "data" / "models" / "built"  # not under tiny/, which Modal bundles copy
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"]) == (512, 8, 64)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]) == (8, 4, 16384)
    card = json.loads((path / "synth_model.json").read_text())
    assert 30_000_000 <= card["parameters"] <= 60_000_000 and card["random_weights"] is True
    assert not loading.is_tiny_folder(path)  # trained with torch's default thread count, like a real model
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    assert len(tokenizer) == 16384
    for token in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</tool_call>"):
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1, token
    # the prose the benches write is made of whole words of the tokenizer's lexicon, not single bytes
    text = mid_prose().paragraph(random.Random(0), 200)
    assert len(tokenizer.encode(text, add_special_tokens=False)) < 2 * len(text.split())
    assert store.resolve("synth-ai/random-qwen3-34m") == path  # built once, then found
    assert {m["id"]: m for m in store.list_models()}["synth-ai/random-qwen3-34m"]["status"] == "ready"
    info = find_model("synth-ai/random-qwen3-34m")
    assert info is not None and info.is_local and info.training_modes == ("sft", "rl")
