"""The model registry against reference §2.5 (with Qwen3-VL corrected to text+image), and `synth-ai models`."""

from __future__ import annotations

import pytest
from conftest import run_cli

from synth_ai.errors import InvalidInputError
from synth_ai.models.registry import (
    all_models,
    check_trainable,
    close_matches,
    experimental_allowed,
    experimental_ids,
    find_model,
    resolve_model,
)

QWEN3 = [f"Qwen/Qwen3-{s}" for s in ("0.6B", "1.7B", "4B", "8B", "14B", "30B-A3B", "32B")] + ["Qwen/Qwen3-4B-2507"]
for _name in ("4B-Instruct-2507", "30B-A3B-Instruct-2507", "235B-A22B-Instruct-2507", "4B-Thinking-2507",
              "30B-A3B-Thinking-2507", "235B-A22B-Thinking-2507"):
    QWEN3 += [f"Qwen/Qwen3-{_name}", f"Qwen/Qwen3-{_name}-FP8"]
CODER = ["Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
         "Qwen/Qwen3-Coder-480B-A35B-Instruct", "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8"]
VL = [f"Qwen/Qwen3-VL-{s}-{v}" for s in ("2B", "4B", "8B", "30B-A3B", "32B", "235B-A22B")
      for v in ("Instruct", "Thinking")]
REFERENCE_IDS = QWEN3 + CODER + VL

RL_CAPABLE = {f"Qwen/Qwen3-{s}" for s in ("0.6B", "1.7B", "4B", "8B", "14B", "30B-A3B", "4B-2507")}
RL_CAPABLE |= {f"Qwen/Qwen3-{n}{fp8}" for n in ("4B-Instruct-2507", "30B-A3B-Instruct-2507", "4B-Thinking-2507",
                                                "30B-A3B-Thinking-2507") for fp8 in ("", "-FP8")}
RL_CAPABLE |= {"Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"}
RL_CAPABLE |= {f"Qwen/Qwen3-VL-{s}-{v}" for s in ("2B", "4B", "8B") for v in ("Instruct", "Thinking")}

THINKING = {i for i in REFERENCE_IDS if "-Thinking" in i}
EXPERIMENTAL = {f"Qwen/Qwen3-{n}{fp8}" for n in ("235B-A22B-Instruct-2507", "235B-A22B-Thinking-2507",
                                                 "Coder-480B-A35B-Instruct", "30B-A3B-Thinking-2507",
                                                 "4B-Thinking-2507") for fp8 in ("", "-FP8")}


def _reference_models():
    return [m for m in all_models() if not m.is_local]


def test_reference_ids_exactly():
    assert len(REFERENCE_IDS) == 36 == len(set(REFERENCE_IDS))
    assert {m.id for m in _reference_models()} == set(REFERENCE_IDS)


def test_every_model_trains_sft():
    assert all("sft" in m.training_modes for m in all_models())


def test_rl_capable_set_matches_reference():
    assert {m.id for m in _reference_models() if "rl" in m.training_modes} == RL_CAPABLE


def test_thinking_models():
    assert {m.id for m in _reference_models() if m.supports_thinking} == THINKING
    assert len(THINKING) == 12


def test_experimental_set():
    assert experimental_ids({}) == EXPERIMENTAL
    assert {m.id for m in all_models() if m.lifecycle == "experimental"} == EXPERIMENTAL


def test_qwen3_vl_is_text_and_image():
    for model_id in VL:
        info = find_model(model_id)
        assert info.modalities == ("text", "image") and info.supports_vision
        assert info.max_images_per_message == 1
        assert info.family == "Qwen3-VL"
    for model_id in QWEN3 + CODER:
        info = find_model(model_id)
        assert info.modalities == ("text",) and not info.supports_vision and info.max_images_per_message == 0


def test_local_models_have_their_own_ids():
    local = {m.id: m for m in all_models() if m.is_local}
    assert set(local) == {"synth-ai/tiny-qwen3", "synth-ai/tiny-qwen3-vl", "synth-ai/tiny-qwen3-hd64",
                          "synth-ai/random-qwen3-34m"}
    assert local["synth-ai/tiny-qwen3-vl"].supports_vision and not local["synth-ai/tiny-qwen3"].supports_vision
    assert not any(m.id.startswith("Qwen/") for m in local.values())


@pytest.mark.parametrize("raw,canonical", [
    ("qwen/qwen3-4b", "Qwen/Qwen3-4B"),
    ("QWEN/QWEN3-VL-2B-INSTRUCT", "Qwen/Qwen3-VL-2B-Instruct"),
    ("  Qwen/Qwen3-30b-a3b-thinking-2507-fp8 ", "Qwen/Qwen3-30B-A3B-Thinking-2507-FP8"),
    ("SYNTH-AI/Tiny-Qwen3-VL", "synth-ai/tiny-qwen3-vl"),
])
def test_case_insensitive_lookup(raw: str, canonical: str):
    resolved = resolve_model(raw)
    assert resolved.canonical == canonical and resolved.base.id == canonical and not resolved.is_fine_tuned


@pytest.mark.parametrize("raw,canonical,base,prefix", [
    ("ft:Qwen/Qwen3-0.6B:job_123", "ft:Qwen/Qwen3-0.6B:job_123", "Qwen/Qwen3-0.6B", "ft"),
    ("FFT:qwen/qwen3-8b:abc", "fft:Qwen/Qwen3-8B:abc", "Qwen/Qwen3-8B", "fft"),
    ("qft:Qwen/Qwen3-VL-4B-Instruct", "qft:Qwen/Qwen3-VL-4B-Instruct", "Qwen/Qwen3-VL-4B-Instruct", "qft"),
    ("rl:org_1:qwen/qwen3-4b:run_9", "rl:org_1:Qwen/Qwen3-4B:run_9", "Qwen/Qwen3-4B", "rl"),
])
def test_fine_tuned_prefixes_resolve_to_base(raw, canonical, base, prefix):
    resolved = resolve_model(raw)
    assert (resolved.canonical, resolved.base.id, resolved.prefix) == (canonical, base, prefix)
    assert resolved.is_fine_tuned


def test_fine_tuned_refused_where_a_base_is_needed():
    with pytest.raises(InvalidInputError, match="is a fine-tuned id; a base model is required") as info:
        resolve_model("ft:Qwen/Qwen3-4B:job", allow_fine_tuned=False)
    assert "Qwen/Qwen3-4B" in info.value.hint


@pytest.mark.parametrize("raw", ["foo:Qwen/Qwen3-4B", "ft:Qwen/Qwen9-4B:job", "Qwen/Qwen3-5B", "Llama-3-8B"])
def test_unknown_ids(raw: str):
    with pytest.raises(InvalidInputError, match=f"Model '{raw}' is not supported") as info:
        resolve_model(raw)
    assert "synth-ai models list" in info.value.hint


def test_unknown_id_lists_close_matches():
    with pytest.raises(InvalidInputError) as info:
        resolve_model("Qwen/Qwen3-4B-Instruct")
    matches = info.value.details["close_matches"]
    assert "Qwen/Qwen3-4B-Instruct-2507" in matches and len(matches) <= 5
    assert info.value.hint.startswith("Did you mean: ")
    assert close_matches("Qwen3-4B")[0] == "Qwen/Qwen3-4B"
    assert close_matches("Qwen/Qwen3-VL-2B")[:2] == ["Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-2B-Thinking"]
    assert close_matches("qwen3-coder-30b")[0] == "Qwen/Qwen3-Coder-30B-A3B-Instruct"
    assert close_matches("zzz") == []


def test_empty_id():
    with pytest.raises(InvalidInputError, match="Model identifier is empty"):
        resolve_model("  ")


def test_training_mode_check():
    with pytest.raises(InvalidInputError, match="does not support RL training") as info:
        check_trainable(resolve_model("Qwen/Qwen3-VL-32B-Instruct"), "rl", allow_experimental=False, environ={})
    assert "Qwen/Qwen3-VL-2B-Instruct" in info.value.hint  # RL-capable models of the same family
    check_trainable(resolve_model("Qwen/Qwen3-VL-32B-Instruct"), "sft", allow_experimental=False, environ={})


def test_experimental_gate():
    thinking = resolve_model("Qwen/Qwen3-4B-Thinking-2507")
    with pytest.raises(InvalidInputError, match="is experimental and disabled"):
        check_trainable(thinking, "rl", allow_experimental=False, environ={})
    check_trainable(thinking, "rl", allow_experimental=True, environ={})
    plain = resolve_model("Qwen/Qwen3-8B")
    check_trainable(plain, "rl", allow_experimental=False, environ={})
    with pytest.raises(InvalidInputError, match="experimental"):
        check_trainable(plain, "rl", allow_experimental=False, environ={"SDK_EXPERIMENTAL_MODELS": "qwen/qwen3-8b"})


def test_sdk_experimental_models_adds_known_ids_only():
    extra = experimental_ids({"SDK_EXPERIMENTAL_MODELS": " qwen/qwen3-8b ,Not/AModel,, Qwen/Qwen3-VL-2B-Instruct"})
    assert extra == EXPERIMENTAL | {"Qwen/Qwen3-8B", "Qwen/Qwen3-VL-2B-Instruct"}


@pytest.mark.parametrize("flag,env,expected", [
    (None, {}, False), (None, {"SDK_EXPERIMENTAL": "1"}, True), (None, {"SDK_EXPERIMENTAL": "0"}, False),
    (True, {}, True), (False, {"SDK_EXPERIMENTAL": "1"}, False),
])
def test_experimental_allowed(flag, env, expected):
    assert experimental_allowed(flag, env) is expected


# ---------------------------------------------------------------------------- CLI


def test_models_list_json():
    result = run_cli("--json", "models", "list")
    assert result.exit_code == 0
    models = {m["id"]: m for m in result.json()["models"]}
    assert set(REFERENCE_IDS) <= set(models)
    vl = models["Qwen/Qwen3-VL-4B-Thinking"]
    assert vl["modalities"] == ["text", "image"] and vl["supports_thinking"] and vl["training_modes"] == ["sft", "rl"]
    assert models["Qwen/Qwen3-4B-Thinking-2507"]["experimental"] is True
    assert models["Qwen/Qwen3-4B"]["experimental"] is False


def test_models_list_mode_rl():
    result = run_cli("models", "list", "--mode", "rl", "--json")
    ids = {m["id"] for m in result.json()["models"]}
    assert {i for i in ids if not i.startswith("synth-ai/")} == RL_CAPABLE


def test_models_list_family_filter_and_human_table(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich folds cells to fit 80 columns when not on a terminal
    result = run_cli("--json", "models", "list", "--family", "qwen3-vl")
    assert {m["id"] for m in result.json()["models"]} == set(VL) | {"synth-ai/tiny-qwen3-vl"}
    human = run_cli("models", "list")
    assert human.exit_code == 0
    assert "model_id" in human.stdout and "Qwen/Qwen3-VL-2B-Instruct" in human.stdout
    assert "text+image" in human.stdout


def test_models_list_experimental_column_follows_env(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SDK_EXPERIMENTAL_MODELS", "Qwen/Qwen3-0.6B")
    models = {m["id"]: m for m in run_cli("--json", "models", "list").json()["models"]}
    assert models["Qwen/Qwen3-0.6B"]["experimental"] is True


def test_models_list_bad_mode():
    result = run_cli("models", "list", "--mode", "dpo")
    assert result.exit_code == 2 and "must be 'sft' or 'rl'" in result.stderr and "--mode" in result.stderr


def test_models_get():
    result = run_cli("--json", "models", "get", "qwen/qwen3-vl-2b-instruct")
    doc = result.json()
    assert doc["id"] == "Qwen/Qwen3-VL-2B-Instruct" and doc["max_images_per_message"] == 1
    assert doc["supports_vision"] is True
    human = run_cli("models", "get", "Qwen/Qwen3-4B")
    assert human.exit_code == 0 and "Qwen/Qwen3-4B" in human.stdout


def test_models_get_fine_tuned():
    doc = run_cli("models", "get", "ft:qwen/qwen3-1.7b:job_1", "--json").json()
    assert doc == {"id": "ft:Qwen/Qwen3-1.7B:job_1", "fine_tuned": True, "prefix": "ft",
                   "base_model": doc["base_model"]}
    assert doc["base_model"]["id"] == "Qwen/Qwen3-1.7B"
    human = run_cli("models", "get", "ft:qwen/qwen3-1.7b:job_1")
    assert "fine-tuned from Qwen/Qwen3-1.7B" in human.stdout


def test_models_get_unknown():
    result = run_cli("models", "get", "Qwen/Qwen3-5B")
    assert result.exit_code == 3
    assert "Model 'Qwen/Qwen3-5B' is not supported" in result.stderr and "Did you mean" in result.stderr
    doc = run_cli("--json", "models", "get", "Qwen/Qwen3-5B").json()
    assert doc["error"]["details"]["close_matches"]
