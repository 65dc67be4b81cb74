"""`synth-ai models export` against a real embedded backend (uvicorn on 127.0.0.1): base models, a LoRA fine-tune
as a PEFT adapter and merged, each loaded with transformers/peft and decoded greedily against the backend's own
inference endpoint; a download resumed after a dropped connection; bad input."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend_support import TINY_TEXT, chat_jsonl, job_status, serve_backend, sft_body, upload, wait_for
from conftest import free_port, run_cli

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
pytest.importorskip("peft")

PROMPT = [{"role": "user", "content": "What is 3 plus 3?"}]
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    yield from serve_backend(tmp_path_factory, "export", tiny=(TINY_TEXT,))


@pytest.fixture(scope="module")
def lora_model(backend, tmp_path_factory) -> str:
    """A LoRA fine-tune of the tiny Qwen3, trained by the backend (a few steps)."""
    with backend.client() as api:
        file_id = upload(api, chat_jsonl(tmp_path_factory.mktemp("data") / "train.jsonl", n=8)).json()["id"]
        job = api.post("/learning/jobs", json=sft_body(file_id, steps=4, train_kind="lora", learning_rate=5e-3))
        assert job.status_code == 201, job.text
        job_id = job.json()["id"]
        api.post(f"/learning/jobs/{job_id}/start", json={})
        wait_for(lambda: job_status(api, job_id) in {"succeeded", "failed", "cancelled"}, timeout=240, interval=0.5,
                 what="the LoRA job")
        done = api.get(f"/learning/jobs/{job_id}").json()
    assert done["status"] == "succeeded", done
    return done["fine_tuned_model"]


@pytest.fixture(autouse=True)
def backend_key(backend, monkeypatch):
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)


def export(backend, model_id: str, out: Path, *extra: str):
    return run_cli("--json", "models", "export", model_id, "--out", str(out), "--backend", backend.url, *extra)


def backend_reply(backend, model_id: str) -> tuple[str, int]:
    """(text, completion tokens) of the backend's greedy answer to PROMPT."""
    with backend.client(timeout=120) as api:
        reply = api.post("/inference/v1/chat/completions", json={
            "model": model_id, "messages": PROMPT, "temperature": 0, "max_tokens": MAX_TOKENS})
    assert reply.status_code == 200, reply.text
    doc = reply.json()
    return doc["choices"][0]["message"]["content"], doc["usage"]["completion_tokens"]


def greedy_tokens(model: Any, folder: Path) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False)
    tokens = out[0, ids.shape[1]:].tolist()
    eos = set(model.generation_config.eos_token_id if isinstance(model.generation_config.eos_token_id, list)
              else [model.generation_config.eos_token_id])
    return tokens[:-1] if tokens and tokens[-1] in eos else tokens


def assert_same_as_backend(backend, model_id: str, model: Any, folder: Path) -> list[int]:
    from transformers import AutoTokenizer

    tokens = greedy_tokens(model, folder)
    text, count = backend_reply(backend, model_id)
    decoded = AutoTokenizer.from_pretrained(str(folder)).decode(tokens, skip_special_tokens=True)
    # the endpoint answers the reply without its (here empty) thinking block: compare the same part
    reply = re.sub(r"^\s*<think>.*?</think>\s*", "", decoded, flags=re.S)
    assert (reply.strip(), len(tokens)) == (text.strip(), count)
    return tokens


def test_a_base_model_exports_as_a_folder_transformers_loads(backend, tmp_path):
    from transformers import AutoModelForCausalLM

    result = export(backend, TINY_TEXT, tmp_path / "base")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["format"] == "full" and doc["merged"] is False
    folder = Path(doc["out"])
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
            "generation_config.json"} <= names
    assert "synth_model.json" not in names  # our own card stays home
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    assert_same_as_backend(backend, TINY_TEXT, model, folder)


def test_a_lora_model_exports_as_an_adapter_and_merged_alike(backend, lora_model, tmp_path):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    adapter = export(backend, lora_model, tmp_path / "adapter")
    assert adapter.exit_code == 0, adapter.stderr
    folder = Path(adapter.json()["out"])
    assert adapter.json()["format"] == "peft_adapter"
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in folder.iterdir()}
    assert not (folder / "model.safetensors").exists()
    config = json.loads((folder / "adapter_config.json").read_text())
    # the tiny base is built on this machine, not on the hub: it came along, and the adapter names its folder
    assert config["base_model_name_or_path"] == str(folder / "base_model")
    assert (folder / "base_model" / "model.safetensors").exists()
    peft_model = AutoPeftModelForCausalLM.from_pretrained(str(folder)).eval()
    adapter_tokens = assert_same_as_backend(backend, lora_model, peft_model, folder)

    merged = export(backend, lora_model, tmp_path / "merged", "--merge")
    assert merged.exit_code == 0, merged.stderr
    merged_folder = Path(merged.json()["out"])
    assert merged.json()["format"] == "full" and merged.json()["merged"] is True
    assert not (merged_folder / "adapter_config.json").exists()
    merged_model = AutoModelForCausalLM.from_pretrained(str(merged_folder)).eval()
    assert greedy_tokens(merged_model, merged_folder) == adapter_tokens
    base = AutoModelForCausalLM.from_pretrained(str(folder / "base_model")).eval()
    assert any(not torch.equal(a, b) for a, b in zip(base.state_dict().values(), merged_model.state_dict().values()))
