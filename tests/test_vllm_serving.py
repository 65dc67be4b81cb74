"""SYNTH_AI_INFERENCE_ENGINE=vllm: a real backend (`synth-ai backend serve` on a free port) whose /api/inference
is sampled by vLLM, over real HTTP and through `synth-ai eval` with the bundled math app: a base model and a LoRA
fine-tune of it (served as an adapter on the base), concurrent requests for both answered each by its own model, a
model vLLM cannot run refused with vLLM's reason, and a backend without vLLM refused at start with the install
command. One backend (one vLLM engine) for the module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from backend_support import serve_backend
from conftest import free_port, run_cli
from taskapp_support import ENV_KEY
from vllm_support import VLLM_ENV, build_head64_qwen3

FINE_TUNE = "ft:head64-qwen3:job-vllmserve"


def _lora_fine_tune(base: Path, folder: Path) -> Path:
    """A LoRA adapter of `base` saved as a fine-tune's folder is (adapter, tokenizer, model card)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(Qwen3ForCausalLM.from_pretrained(base), LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    card = {"kind": "fine_tuned", "training_kind": "lora", "model_id": FINE_TUNE, "base_model": str(base)}
    (folder / "synth_model.json").write_text(json.dumps(card))
    return folder


@pytest.fixture(scope="module")
def served(require_vllm, tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("peft")
    from synth_ai.backend.store.model_store import ModelStore

    root = tmp_path_factory.mktemp("vllmserve")
    base = build_head64_qwen3(root / "head64")
    fine_tune = _lora_fine_tune(base, root / "fine-tune")

    def register(data_dir: Path) -> None:
        ModelStore(data_dir).register_fine_tuned(FINE_TUNE, str(base), "job-vllmserve", fine_tune)

    for backend in serve_backend(tmp_path_factory, "vllmserve-backend", prepare=register,
                                 env={"SYNTH_AI_INFERENCE_ENGINE": "vllm", **VLLM_ENV}):
        yield backend, str(base)


def _chat(client, model: str, content: str = "What is 2 + 3?"):
    return client.post("/inference/v1/chat/completions", json={
        "model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 8, "temperature": 1.0,
        "seed": 7})  # random weights: sampled (seeded) text, where greedy would end the turn at once


def test_base_and_lora_fine_tune_are_served_by_vllm_each_with_its_own_weights(served) -> None:
    backend, base = served
    with backend.client(timeout=300) as client:
        alone = {}
        for model in (base, FINE_TUNE):
            response = _chat(client, model)
            assert response.status_code == 200, response.text
            assert response.json()["model"] == model and response.json()["usage"]["completion_tokens"] > 0
            alone[model] = response.json()["choices"][0]["message"]["content"]
        assert alone[base] != alone[FINE_TUNE]  # the adapter is applied to the fine-tune only
        with ThreadPoolExecutor(4) as pool:  # arriving together, batched apart: each keeps its own answer
            together = list(pool.map(lambda m: _chat(client, m), [base, FINE_TUNE, base, FINE_TUNE]))
        assert [r.json()["choices"][0]["message"]["content"] for r in together] == [alone[base], alone[FINE_TUNE]] * 2


def test_a_model_vllm_cannot_run_is_refused_with_vllms_reason(served, tmp_path: Path) -> None:
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    backend, base = served
    head16 = tmp_path / "head16"  # the head size of the project's tiny Qwen3, which vLLM's CPU attention lacks
    Qwen3ForCausalLM(Qwen3Config(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=16)).save_pretrained(head16)
    AutoTokenizer.from_pretrained(base).save_pretrained(head16)
    with backend.client(timeout=300) as client:
        refused = _chat(client, str(head16))
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert "vLLM cannot run" in error["message"] and "head_dim=16" in error["message"]
        assert "Traceback" not in refused.text and "SYNTH_AI_INFERENCE_ENGINE=builtin" in error["hint"]
        again = _chat(client, base)
        assert again.status_code == 200, again.text  # the backend still serves what vLLM can run


def test_eval_runs_against_the_vllm_backend(served, isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = served
    monkeypatch.setenv("SYNTH_AI_HOME", str(backend.data_dir))  # `eval` finds this running backend as embedded
    monkeypatch.setenv("SYNTH_AI_BACKEND_PORT", str(backend.port))
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    config = isolated_home / "eval.toml"
    config.write_text('[eval]\napp_id = "math-single-step"\nseeds = "0-1"\nsplit = "test"\n\n'
                      '[eval.policy_config]\nmax_tokens = 12\ntemperature = 0.0\ntimeout_s = 300\n')
    result = run_cli("--json", "eval", "--config", str(config), "--model", FINE_TUNE, "--trace-db", "none")
    assert result.exit_code == 0, result.stdout + result.stderr
    doc = result.json()
    assert doc["model"] == FINE_TUNE and doc["inference_url"].startswith(backend.url)
    assert [r["status"] for r in doc["results"]] == ["ok", "ok"]


def test_a_backend_without_vllm_refuses_the_vllm_engine_at_start(isolated_home: Path) -> None:
    # vLLM made unimportable in this one process (where it is installed, the check must still refuse)
    code = ("import sys; sys.modules['vllm'] = None; from synth_ai.cli.main import main; "
            "sys.exit(main(['backend', 'serve', '--port', sys.argv[1]]))")
    env = dict(os.environ, SYNTH_AI_INFERENCE_ENGINE="vllm")
    done = subprocess.run([sys.executable, "-c", code, str(free_port())], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "SYNTH_AI_INFERENCE_ENGINE=vllm, but vLLM is not installed" in done.stderr
    assert "./scripts/bootstrap.sh --vllm" in done.stderr and "Traceback" not in done.stderr
