"""An RL job in LoRA mode whose model is an imported PEFT adapter continues that adapter (its own rank, alpha and
target modules, from its imported weights) on the bundled color-quiz app, and the `rl:` model it saves is a LoRA
adapter on the root base, like SFT's continuation of an imported adapter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backend_support import TINY_TEXT, link_tiny
from rl_support import Recorder, quiz_app, rl_body
from taskapp_support import running_app

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
pytest.importorskip("peft")

ENV_KEY = "sk_env_rl_imported_0123456789"
LEARNING_RATE = 1e-3
ITERATIONS = 3


def outside_adapter(tiny: Path, out: Path) -> dict[str, Any]:
    """A PEFT adapter made elsewhere (rank 4 on q/v, small random non-zero weights: the policy stays close enough to
    the base to earn mixed rewards); its tensors by peft's saved names."""
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    torch.manual_seed(7)
    base = AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05)
    model.save_pretrained(str(out))
    return load_file(str(out / "adapter_model.safetensors"))


def test_lora_rl_continues_an_imported_adapter_from_its_weights(tmp_path: Path, tiny_text_models: list[Path],
                                                                 monkeypatch: pytest.MonkeyPatch):
    from safetensors.torch import load_file

    from synth_ai.backend.store.model_import import import_model
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl import run_rl

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    imported = outside_adapter(tiny_text_models[0], tmp_path / "adapter")
    data = tmp_path / "store"
    link_tiny(data, tiny_text_models)
    store = ModelStore(data)
    model_id = import_model(store, tmp_path / "adapter", name="pirate", base=TINY_TEXT)["id"]
    recorder = Recorder()
    with running_app(quiz_app()) as app:
        body = rl_body(app, tables={"model": {"trainer_mode": "lora"}, "lora": {"r": 16, "alpha": 32},
                                    "reference": {"placement": "colocated"}},
                       iterations_per_epoch=ITERATIONS, learning_rate=LEARNING_RATE, seed=3, kl_coef=0.05)
        body["data"]["model"] = model_id
        result = run_rl({"job_id": "rljob_imported", **body}, workdir=tmp_path / "work", model_store=store,
                        reporter=recorder, should_stop=lambda: False)

    # the adapter's own shape applies, and the job says its [lora] settings were set aside
    adjusted = recorder.of("rl.config.adjusted")
    assert [e["data"] for e in adjusted] == [{"mode": "lora", "lora_r": 4, "lora_alpha": 8.0,
                                              "lora_targets": ["q_proj", "v_proj"]}]
    # the sampler holds the imported adapter too: the first update is exactly on-policy
    trained_steps = [s["data"] for s in recorder.of("rl.train.step") if "ratio_mean" in s["data"]]
    assert trained_steps and [s["ratio_mean"] for s in trained_steps] == pytest.approx([1.0] * len(trained_steps),
                                                                                      abs=1e-5)
    # the reference is the starting policy, the imported adapter: no KL to it before the first update
    assert trained_steps[0]["kl_ref"] == pytest.approx(0.0, abs=1e-6)

    # the saved rl: model is a LoRA adapter of the root base with the imported rank and targets
    assert result["fine_tuned_model"] == f"rl:{TINY_TEXT}:rljob_imported"
    final = Path(result["checkpoint_dir"]) if "checkpoint_dir" in result else tmp_path / "work" / "final"
    adapter_config = json.loads((final / "adapter_config.json").read_text())
    assert adapter_config["r"] == 4 and adapter_config["lora_alpha"] == 8
    assert sorted(adapter_config["target_modules"]) == ["q_proj", "v_proj"]
    card = json.loads((final / "synth_model.json").read_text())
    assert card["training_kind"] == "lora" and card["base_model"] == TINY_TEXT and card["source_model"] == model_id

    # ...trained on from the imported weights: each AdamW step (no weight decay) moves a weight by at most about
    # the learning rate, so every tensor stays within ITERATIONS x lr of the imported one, and some moved
    trained = load_file(str(final / "adapter_model.safetensors"))
    assert sorted(trained) == sorted(imported)
    drift = max(float((trained[name].float() - imported[name].float()).abs().max()) for name in imported)
    assert 0 < drift <= ITERATIONS * LEARNING_RATE * 1.01
    assert max(float(t.abs().max()) for t in imported.values() if t.ndim) > 10 * ITERATIONS * LEARNING_RATE
