"""The runtime SFT and RL share (`backend/trainers/runtime.py`): one place chooses the device, dtype and threads,
with one bf16 rule, and both trainers get their runtime and their policy from it."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

TRAINERS = Path(__file__).resolve().parents[1] / "src" / "synth_ai" / "backend" / "trainers"
TINY_TEXT = "synth-ai/tiny-qwen3"


def test_only_the_shared_runtime_chooses_device_dtype_and_threads() -> None:
    choosing = re.compile(r"loading\.placement\(|configure_threads\(|torch\.bfloat16 if")
    found = sorted(str(path.relative_to(TRAINERS)) for path in TRAINERS.rglob("*.py")
                   if choosing.search(path.read_text()))
    assert found == ["runtime.py"]
    for user in ("rl/policy.py", "sft/trainer.py"):
        assert "choose_runtime(" in (TRAINERS / user).read_text(), user
    for user in ("rl/policy.py", "sft/model_setup.py"):
        assert "load_trainable_policy(" in (TRAINERS / user).read_text(), user


@pytest.fixture()
def store(tiny_text_models: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    from synth_ai.backend.store.model_store import ModelStore

    return ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")


def test_one_bf16_rule_for_both_trainers(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.runtime import choose_runtime

    notes: list[str] = []
    on_cpu = choose_runtime(store, TINY_TEXT, bf16=True, notes=notes)  # SFT asking for bf16 on this CPU
    assert not on_cpu.use_bf16 and on_cpu.dtype_name == "fp32" and on_cpu.load_dtype("lora") == torch.float32
    assert notes == ["bf16 was requested but no CUDA GPU with bf16 support is present: training in fp32."]
    assert choose_runtime(store, TINY_TEXT, notes=notes).tiny and len(notes) == 1  # RL: no request, no note

    # a GPU with bf16 (only the device probe is replaced: the rule reads nothing else of the hardware)
    monkeypatch.setattr(loading, "placement", lambda: loading.Placement("cuda", torch.bfloat16))
    rl = choose_runtime(store, TINY_TEXT)  # RL has no bf16 key
    sft = choose_runtime(store, TINY_TEXT, bf16=None)
    sft_off = choose_runtime(store, TINY_TEXT, bf16=False)
    assert rl.use_bf16 and sft.use_bf16 and not sft_off.use_bf16
    assert rl.load_dtype("lora") == torch.bfloat16 and rl.load_dtype("full") == torch.float32


def test_rl_and_sft_load_the_same_lora_policy_from_the_same_seed(store: Any) -> None:
    """The same runtime, seed and LoRA settings give both trainers the same starting weights."""
    import torch

    from synth_ai.backend.trainers.runtime import choose_runtime, load_trainable_policy, with_lora

    settings = SimpleNamespace(mode="lora", lora_r=4, lora_alpha=8.0, lora_dropout=0.0, lora_targets="all-linear",
                               base_model=TINY_TEXT)
    runtime = choose_runtime(store, TINY_TEXT)
    models = []
    for merges in (True, False):  # RL's and SFT's setting of the one difference (no imported adapter here)
        policy = load_trainable_policy(store, TINY_TEXT, runtime, settings, seed=11, full_mode_merges_adapter=merges)
        assert not policy.continued_adapter and policy.adjustment is None and policy.root_base == TINY_TEXT
        models.append(with_lora(policy, settings, runtime))
    first, second = (dict(m.named_parameters()) for m in models)
    assert any("lora_A" in name for name in first)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)
