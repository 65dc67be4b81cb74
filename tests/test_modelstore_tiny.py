"""Model store and tiny-model builder: deterministic builds, one build under concurrency, ids and errors."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from synth_ai.backend.store.model_store import ModelStore
from synth_ai.errors import InvalidInputError, NotFoundError

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

# A small recipe: same code path as the real one, a fraction of the steps.
QUICK = dict(tokenizer_conversations=300, pretrain_steps=6, pretrain_batch=2, pretrain_seq_len=64, vl_steps=2,
             vl_batch=2)


@pytest.fixture(scope="session")
def ml_store(tmp_path_factory: pytest.TempPathFactory) -> ModelStore:
    """The session's model store with both tiny models built (shared by every ML test module via basetemp)."""
    store = ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")
    store.resolve("synth-ai/tiny-qwen3")
    store.resolve("synth-ai/tiny-qwen3-vl")
    return store


def test_tiny_build_is_deterministic(tmp_path: Path) -> None:
    from synth_ai.backend.ml import tiny

    recipe = tiny.TinyRecipe(**QUICK)
    first = tiny.build_text(tmp_path / "a", recipe)
    second = tiny.build_text(tmp_path / "b", recipe)
    assert tiny.weights_digest(tmp_path / "a") == tiny.weights_digest(tmp_path / "b")
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert first["pretrain_loss_first"] == second["pretrain_loss_first"]
    tiny.build_vl(tmp_path / "va", tmp_path / "a", recipe)
    tiny.build_vl(tmp_path / "vb", tmp_path / "a", recipe)
    assert tiny.weights_digest(tmp_path / "va") == tiny.weights_digest(tmp_path / "vb")


def test_tiny_models_have_the_real_architectures(ml_store: ModelStore) -> None:
    from transformers import AutoTokenizer

    text = ml_store.resolve("synth-ai/tiny-qwen3")
    vl = ml_store.resolve("SYNTH-AI/tiny-qwen3-vl")  # ids are case-insensitive
    assert json.loads((text / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
    config = json.loads((vl / "config.json").read_text())
    assert config["architectures"] == ["Qwen3VLForConditionalGeneration"]
    assert config["tie_word_embeddings"] is True
    assert (vl / "preprocessor_config.json").exists()
    card = json.loads((text / "synth_model.json").read_text())
    # brief pretraining happened: the loss fell far below a random model's ~6.9
    assert card["pretrain_loss_final"] < card["pretrain_loss_first"] - 3
    tok = AutoTokenizer.from_pretrained(str(text))
    assert len(tok) <= 1024
    for token in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
                  "</tool_call>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"):
        ids = tok.encode(token, add_special_tokens=False)
        assert len(ids) == 1, token
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert "{% generation %}" in tok.chat_template.replace("{%- generation %}", "{% generation %}")


def test_concurrent_builds_build_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from synth_ai.backend.ml import tiny

    store = ModelStore(tmp_path / "data")
    recipe = tiny.TinyRecipe(**QUICK)
    results: list[Path] = []
    errors: list[BaseException] = []
    calls = []
    real_build = tiny.build_text

    def counting_build(*args, **kwargs):
        calls.append(1)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(tiny, "build_text", counting_build)

    def build() -> None:
        try:
            results.append(store.ensure_tiny("synth-ai/tiny-qwen3", recipe))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(calls) == 1
    assert len(set(results)) == 1 and (results[0] / "config.json").exists()
    # no staging folder is left behind
    assert [p.name for p in results[0].parent.iterdir() if p.name.startswith(".")] == []


def test_real_model_missing_offline_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    store = ModelStore(tmp_path / "data")
    with pytest.raises(NotFoundError) as info:
        store.resolve("Qwen/Qwen3-0.6B")
    assert "not available offline" in info.value.message
    assert "huggingface-cli download Qwen/Qwen3-0.6B" in (info.value.hint or "")


def test_real_model_from_local_folder_and_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants as constants

    cache = tmp_path / "hub"
    snapshot = cache / "models--Qwen--Qwen3-1.7B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (cache / "models--Qwen--Qwen3-1.7B" / "refs").mkdir()
    (cache / "models--Qwen--Qwen3-1.7B" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    store = ModelStore(tmp_path / "data")
    assert store.resolve("Qwen/Qwen3-1.7B") == snapshot
    local = tmp_path / "data" / "models" / "local" / "Qwen" / "Qwen3-0.6B"
    local.mkdir(parents=True)
    (local / "config.json").write_text("{}")
    assert store.resolve("Qwen/Qwen3-0.6B") == local
    ids = {m["id"]: m for m in store.list_models()}
    assert ids["Qwen/Qwen3-1.7B"]["source"] == "hf_cache" and ids["Qwen/Qwen3-0.6B"]["source"] == "local"
    assert ids["synth-ai/tiny-qwen3"]["status"] == "builds_on_first_use"
    assert store.resolve(str(local)) == local  # an absolute folder works too


def test_register_and_resolve_fine_tuned(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "data")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "synth_model.json").write_text(json.dumps({"training_kind": "lora"}))
    store.register_fine_tuned("ft:synth-ai/tiny-qwen3:job_1", "synth-ai/tiny-qwen3", "job_1", ckpt)
    assert store.resolve("ft:synth-ai/tiny-qwen3:job_1") == ckpt.resolve()
    assert store.resolve("FT:synth-ai/tiny-qwen3:job_1") == ckpt.resolve()
    entry = next(m for m in store.list_models() if m["id"] == "ft:synth-ai/tiny-qwen3:job_1")
    assert entry["kind"] == "fine_tuned" and entry["job_id"] == "job_1" and entry["training"] == "lora"
    assert entry["base_model"] == "synth-ai/tiny-qwen3" and entry["created_at"]
    # the index is plain JSON written atomically (no temp files left)
    assert json.loads((tmp_path / "data" / "models" / "index.json").read_text())
    assert not list((tmp_path / "data" / "models").glob(".index.json.*"))
    with pytest.raises(NotFoundError):
        store.resolve("ft:synth-ai/tiny-qwen3:job_unknown")
    with pytest.raises(InvalidInputError):
        store.register_fine_tuned("synth-ai/tiny-qwen3", "synth-ai/tiny-qwen3", "job", ckpt)
    with pytest.raises(InvalidInputError):
        store.resolve("  ")
