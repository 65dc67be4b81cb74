"""vLLM loads what `models export` writes: a LoRA fine-tune exported as a PEFT adapter (on its exported base) and
merged, decoding greedily the tokens transformers decodes from the merged export.

vLLM's CPU attention refuses head_dim 16 (the tiny models), so the test builds a head_dim-64 Qwen3 with random
weights (the tiny model's tokenizer) and a random LoRA adapter on it, registered in a model store as a fine-tune.
Skipped when vllm is not installed, unless SYNTH_REQUIRE_VLLM=1 (then its absence fails)."""

from __future__ import annotations

import gc
import json
import os
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
pytest.importorskip("peft")

BASE_ID = "test/qwen3-hd64"
FINE_TUNED = f"ft:{BASE_ID}:job_vllm"
PROMPT = "What is 3 plus 3?"
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def vllm():
    try:
        import vllm
    except ImportError:
        if os.environ.get("SYNTH_REQUIRE_VLLM") == "1":
            raise
        pytest.skip("vllm is not installed (set SYNTH_REQUIRE_VLLM=1 to make its absence fail)")
    return vllm


def build_store(root: Path, tiny: Path):
    """A model store with a head_dim-64 base under models/local/ and a LoRA fine-tune of it in the index."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from synth_ai.backend.store.model_store import ModelStore

    store = ModelStore(root)
    base_dir = store.local_root / BASE_ID
    base_dir.mkdir(parents=True)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    ids = json.loads((tiny / "config.json").read_text())
    config = Qwen3Config(vocab_size=ids["vocab_size"], hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=512,
                         tie_word_embeddings=True, initializer_range=0.2, **{
                             k: ids[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in ids})
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(str(base_dir))
    tokenizer.save_pretrained(str(base_dir))
    shutil.copy2(tiny / "chat_template.jinja", base_dir / "chat_template.jinja")

    adapter_dir = root / "jobs" / "job_vllm" / "final"
    torch.manual_seed(1)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False,
                      task_type="CAUSAL_LM")
    get_peft_model(Qwen3ForCausalLM.from_pretrained(str(base_dir)), lora).save_pretrained(str(adapter_dir))
    tokenizer.save_pretrained(str(adapter_dir))
    (adapter_dir / "synth_model.json").write_text(json.dumps({
        "kind": "fine_tuned", "model_id": FINE_TUNED, "base_model": BASE_ID, "job_id": "job_vllm",
        "training_kind": "lora"}))
    store.register_fine_tuned(FINE_TUNED, BASE_ID, "job_vllm", adapter_dir)
    return store


def prompt_ids(folder: Path) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    text = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                         tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def transformers_tokens(folder: Path, ids: list[int]) -> list[int]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, min_new_tokens=MAX_TOKENS,
                             do_sample=False)
    return out[0, len(ids):].tolist()


def vllm_tokens(vllm, folder: Path, ids: list[int], *, adapter: Path | None = None) -> list[list[int]]:
    """Greedy tokens from vLLM loading `folder` in this process: without the adapter, then with it (when given)."""
    from vllm.lora.request import LoRARequest

    from synth_ai.backend.inference.vllm_engine import create_llm  # vllm.LLM, safe in a process that ran crafter

    llm = create_llm(dict(model=str(folder), dtype="float32", enforce_eager=True, max_model_len=256, seed=0,
                          enable_lora=adapter is not None, max_lora_rank=8, max_loras=1))
    params = vllm.SamplingParams(temperature=0, max_tokens=MAX_TOKENS, min_tokens=MAX_TOKENS)
    try:
        runs = [None] + ([LoRARequest("export", 1, str(adapter))] if adapter is not None else [])
        return [list(llm.generate({"prompt_token_ids": ids}, params, lora_request=request)[0].outputs[0].token_ids)
                for request in runs]
    finally:
        del llm
        gc.collect()


def test_vllm_loads_the_adapter_and_the_merged_export(vllm, tiny_text_models, tmp_path, monkeypatch):
    from synth_ai.backend.store.model_export import build_export, exports_root

    for name, value in (("VLLM_ENABLE_V1_MULTIPROCESSING", "0"), ("VLLM_CPU_KVCACHE_SPACE", "1")):
        monkeypatch.setenv(name, value)
    store = build_store(tmp_path / "data", tiny_text_models[0])
    adapter = build_export(store, FINE_TUNED)
    merged = build_export(store, FINE_TUNED, merge=True)
    assert adapter["format"] == "peft_adapter" and adapter["local_base"] == "base_model"
    adapter_dir = exports_root(store) / adapter["id"] / "files"
    merged_dir = exports_root(store) / merged["id"] / "files"
    ids = prompt_ids(merged_dir)

    expected = transformers_tokens(merged_dir, ids)
    base_run, lora_run = vllm_tokens(vllm, adapter_dir / "base_model", ids, adapter=adapter_dir)
    assert lora_run == expected
    assert base_run == transformers_tokens(adapter_dir / "base_model", ids) != expected  # the adapter matters
    assert vllm_tokens(vllm, merged_dir, ids) == [expected]
