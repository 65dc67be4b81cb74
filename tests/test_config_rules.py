"""Model-dependent rules: Qwen3-VL injection (what the product documents), SFT batch clamping, thinking modes,
and the flag/env precedence that decides the task URL and the model."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from synth_ai.config.common import ResolveContext
from synth_ai.config.loader import load_config
from synth_ai.errors import ConfigError

DATA = Path(__file__).parent / "data" / "broken_configs"
RL = (DATA / "rl_base.toml").read_text()
SFT = (DATA / "sft_base.toml").read_text()
EVAL = (DATA / "eval_base.toml").read_text()


def sub(text: str, *changes: tuple[str, str]) -> str:
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def load(tmp_path: Path, text: str, kind: str, **ctx):
    work = tmp_path / "work"
    (work / "train.jsonl").write_text('{"messages": []}\n')
    path = work / f"{kind}.toml"
    path.write_text(text)
    return load_config(path, kind, ResolveContext(**{"environ": {}, **ctx}))


def notes(loaded) -> dict[str, str]:
    return {n.key: n.message for n in loaded.notes}


VL_RL = sub(RL, ('base = "Qwen/Qwen3-4B"', 'base = "Qwen/Qwen3-VL-4B-Instruct"'))
VL_SFT = sub(SFT, ('model = "Qwen/Qwen3-4B"', 'model = "Qwen/Qwen3-VL-2B-Instruct"'))


# ---------------------------------------------------------------------------- RL on Qwen3-VL


def test_vl_rl_defaults_come_from_the_registry(tmp_path: Path):
    loaded = load(tmp_path, VL_RL, "rl")
    model = loaded.resolved["model"]
    assert model["supports_vision"] is True
    assert model["max_images_per_message"] == 1
    assert model["vision_processor_id"] == "Qwen/Qwen3-VL-4B-Instruct"
    assert loaded.resolved["rollout"]["max_images_per_step"] == 1
    assert loaded.resolved["vllm"]["limit_mm_per_prompt"] == {"image": 1}
    assert "lora" not in loaded.resolved  # full fine-tune: no LoRA table invented
    shown = notes(loaded)
    for key in ("[model].supports_vision", "[model].max_images_per_message", "[model].vision_processor_id",
                "[rollout].max_images_per_step", "[vllm].limit_mm_per_prompt"):
        assert key in shown
    assert not loaded.warnings


def test_vl_rl_explicit_values_win(tmp_path: Path):
    text = sub(VL_RL, ('label = "base-rl"', 'label = "base-rl"\nmax_images_per_message = 3\n'
                                            'vision_processor_id = "my-org/processor"'),
               ("max_model_len = 4096", "max_model_len = 4096\nlimit_mm_per_prompt = { image = 2 }"),
               ("max_concurrent_rollouts = 2", "max_concurrent_rollouts = 2\nmax_images_per_step = 2"))
    loaded = load(tmp_path, text, "rl")
    model = loaded.resolved["model"]
    assert (model["max_images_per_message"], model["vision_processor_id"]) == (3, "my-org/processor")
    assert loaded.resolved["vllm"]["limit_mm_per_prompt"] == {"image": 2}
    assert loaded.resolved["rollout"]["max_images_per_step"] == 2
    assert set(notes(loaded)) == {"[model].supports_vision"}


def test_vl_rl_max_images_per_step_defaults_to_explicit_message_limit(tmp_path: Path):
    loaded = load(tmp_path, sub(VL_RL, ('label = "base-rl"', 'label = "base-rl"\nmax_images_per_message = 2')), "rl")
    assert loaded.resolved["rollout"]["max_images_per_step"] == 2
    assert loaded.resolved["vllm"]["limit_mm_per_prompt"] == {"image": 2}


def test_vl_rl_max_images_per_step_within_raised_limit(tmp_path: Path):
    text = sub(VL_RL, ('label = "base-rl"', 'label = "base-rl"\nmax_images_per_message = 4'),
               ("max_concurrent_rollouts = 2", "max_concurrent_rollouts = 2\nmax_images_per_step = 4"))
    assert load(tmp_path, text, "rl").resolved["rollout"]["max_images_per_step"] == 4


def test_vl_rl_over_the_limit_names_the_limit(tmp_path: Path):
    text = sub(VL_RL, ("max_concurrent_rollouts = 2", "max_concurrent_rollouts = 2\nmax_images_per_step = 3"))
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text, "rl")
    (issue,) = [i for i in info.value.issues if i.severity == "error"]
    assert issue.key == "[rollout].max_images_per_step" and "limit 1" in issue.message
    assert issue.fix and "<= 1" in issue.fix


def test_vl_rl_without_vllm_table_does_not_invent_one(tmp_path: Path):
    loaded = load(tmp_path, sub(VL_RL, ("[vllm]\nmax_model_len = 4096\n", "")), "rl")
    assert "vllm" not in loaded.resolved


def test_vl_rl_vision_switched_off(tmp_path: Path):
    loaded = load(tmp_path, sub(VL_RL, ('label = "base-rl"', 'label = "base-rl"\nsupports_vision = false')), "rl")
    model = loaded.resolved["model"]
    assert model["supports_vision"] is False
    assert "max_images_per_message" not in model and "vision_processor_id" not in model
    assert "max_images_per_step" not in loaded.resolved["rollout"]


@pytest.mark.parametrize("targets,expected", [
    (None, ["all-linear"]),
    ('["q_proj", "v_proj"]', ["q_proj", "v_proj", "mm_projector"]),
    ('["all-linear"]', ["all-linear"]),
    ('["q_proj", "mm_projector"]', ["q_proj", "mm_projector"]),
])
def test_vl_rl_lora_targets_keep_the_projector(tmp_path: Path, targets, expected):
    lora = "\n[lora]\nr = 16\n" + (f"target_modules = {targets}\n" if targets else "")
    loaded = load(tmp_path, VL_RL + lora, "rl")
    assert loaded.resolved["lora"]["target_modules"] == expected
    assert loaded.resolved["lora"]["r"] == 16
    changed = targets is None or ("mm_projector" in expected and "mm_projector" not in targets)
    assert ("[lora].target_modules" in notes(loaded)) == changed


def test_vl_rl_lora_trainer_mode_without_lora_table_gets_all_linear(tmp_path: Path):
    loaded = load(tmp_path, sub(VL_RL, ('trainer_mode = "full"', 'trainer_mode = "lora"')), "rl")
    assert loaded.resolved["lora"] == {"target_modules": ["all-linear"]}


def test_vl_rl_training_lora_table(tmp_path: Path):
    text = VL_RL.replace("[evaluation]", '[training.lora]\nr = 4\ntarget_modules = ["o_proj"]\n\n[evaluation]')
    loaded = load(tmp_path, text, "rl")
    assert loaded.resolved["training"]["lora"]["target_modules"] == ["o_proj", "mm_projector"]


def test_text_rl_lora_targets_untouched(tmp_path: Path):
    loaded = load(tmp_path, RL + '\n[lora]\ntarget_modules = ["q_proj"]\n', "rl")
    assert loaded.resolved["lora"]["target_modules"] == ["q_proj"]
    assert "supports_vision" not in loaded.resolved["model"]


def test_vl_rl_policy_table_gets_vision_defaults(tmp_path: Path):
    text = sub(VL_RL, ('[model]\nbase = "Qwen/Qwen3-VL-4B-Instruct"',
                       '[policy]\nmodel_name = "Qwen/Qwen3-VL-4B-Instruct"'))
    policy = load(tmp_path, text, "rl").resolved["policy"]
    assert policy["supports_vision"] is True and policy["vision_processor_id"] == "Qwen/Qwen3-VL-4B-Instruct"


def test_vl_rl_fine_tuned_source_gets_base_processor(tmp_path: Path):
    text = sub(VL_RL, ('base = "Qwen/Qwen3-VL-4B-Instruct"', 'source = "ft:Qwen/Qwen3-VL-4B-Instruct:job_3"'))
    model = load(tmp_path, text, "rl").resolved["model"]
    assert model["vision_processor_id"] == "Qwen/Qwen3-VL-4B-Instruct"


def test_model_flag_to_a_vl_model_applies_vision_rules(tmp_path: Path):
    loaded = load(tmp_path, RL, "rl", model="Qwen/Qwen3-VL-2B-Instruct")
    assert loaded.resolved["model"]["source"] == "Qwen/Qwen3-VL-2B-Instruct"
    assert loaded.resolved["model"]["supports_vision"] is True


def test_model_flag_to_a_text_model_rejects_vision_settings(tmp_path: Path):
    text = sub(VL_RL, ("max_concurrent_rollouts = 2", "max_concurrent_rollouts = 2\nuse_vision = true"))
    load(tmp_path, text, "rl")  # fine on the VL model
    with pytest.raises(ConfigError, match=r"\[rollout\]\.use_vision.*text-only"):
        load(tmp_path, text, "rl", model="Qwen/Qwen3-4B")


# ---------------------------------------------------------------------------- SFT on Qwen3-VL


def test_vl_sft_clamps_batches_and_keeps_the_global_batch(tmp_path: Path):
    text = sub(VL_SFT, ("per_device_batch = 2", "per_device_batch = 4\nper_device_eval_batch = 4"),
               ("gradient_accumulation_steps = 4", "gradient_accumulation_steps = 2"))
    loaded = load(tmp_path, text, "sft")
    hyper = loaded.resolved["hyperparameters"]
    assert (hyper["per_device_batch"], hyper["gradient_accumulation_steps"]) == (1, 8)
    assert hyper["per_device_eval_batch"] == 1
    shown = notes(loaded)
    assert "clamped from 4 to 1" in shown["[hyperparameters].per_device_batch"]
    assert "raised from 2 to 8" in shown["[hyperparameters].per_device_batch"]
    assert "clamped from 4 to 1" in shown["[hyperparameters].per_device_eval_batch"]


def test_vl_sft_clamp_without_accumulation(tmp_path: Path):
    text = sub(VL_SFT, ("gradient_accumulation_steps = 4\n", ""), ("per_device_batch = 2", "per_device_batch = 3"))
    hyper = load(tmp_path, text, "sft").resolved["hyperparameters"]
    assert (hyper["per_device_batch"], hyper["gradient_accumulation_steps"]) == (1, 3)


def test_vl_sft_global_batch_still_consistent_after_clamp(tmp_path: Path):
    text = sub(VL_SFT, ("per_device_batch = 2", "per_device_batch = 2\nglobal_batch = 16"))
    loaded = load(tmp_path, text, "sft")  # 2 x 4 x 2 GPUs = 16 before and 1 x 8 x 2 after
    assert not [w for w in loaded.warnings if w.key == "[hyperparameters].global_batch"]


def test_text_sft_is_not_clamped(tmp_path: Path):
    hyper = load(tmp_path, SFT, "sft").resolved["hyperparameters"]
    assert (hyper["per_device_batch"], hyper["gradient_accumulation_steps"]) == (2, 4)
    assert "model_config" not in load(tmp_path, SFT, "sft").resolved


def test_vl_sft_model_config_defaults_and_bf16(tmp_path: Path):
    text = sub(VL_SFT, ("bf16 = true\n", ""))
    loaded = load(tmp_path, text, "sft")
    assert loaded.resolved["model_config"] == {"supports_vision": True, "max_images_per_message": 1,
                                               "vision_processor_id": "Qwen/Qwen3-VL-2B-Instruct"}
    assert loaded.resolved["hyperparameters"]["parallelism"]["bf16"] is True
    assert "[hyperparameters.parallelism].bf16" in notes(loaded)


def test_vl_sft_explicit_fp16_is_kept(tmp_path: Path):
    text = sub(VL_SFT, ("bf16 = true", "fp16 = true"))
    parallelism = load(tmp_path, text, "sft").resolved["hyperparameters"]["parallelism"]
    assert parallelism.get("fp16") is True and "bf16" not in parallelism


def test_vl_sft_explicit_model_config_wins(tmp_path: Path):
    text = VL_SFT + '\n[model_config]\nmax_images_per_message = 2\nvision_processor_id = "x/proc"\n'
    config = load(tmp_path, text, "sft").resolved["model_config"]
    assert config == {"supports_vision": True, "max_images_per_message": 2, "vision_processor_id": "x/proc"}


LORA_SFT = sub(VL_SFT, ('variety = "fft"', 'variety = "lora"'), ('mode = "full_finetune"', 'mode = "lora"'))


def test_vl_sft_lora_without_targets_gets_all_linear(tmp_path: Path):
    hyper = load(tmp_path, LORA_SFT, "sft").resolved["hyperparameters"]
    assert hyper["lora_target_modules"] == ["all-linear"]


def test_vl_sft_lora_hyperparameter_targets_get_projector(tmp_path: Path):
    text = sub(LORA_SFT, ("warmup_ratio = 0.05", 'warmup_ratio = 0.05\nlora_target_modules = ["q_proj"]'))
    hyper = load(tmp_path, text, "sft").resolved["hyperparameters"]
    assert hyper["lora_target_modules"] == ["q_proj", "mm_projector"]


def test_vl_sft_lora_table_targets_get_projector(tmp_path: Path):
    loaded = load(tmp_path, LORA_SFT + '\n[lora]\ntarget_modules = ["v_proj"]\n', "sft")
    assert loaded.resolved["lora"]["target_modules"] == ["v_proj", "mm_projector"]
    assert "lora_target_modules" not in loaded.resolved["hyperparameters"]


def test_vl_sft_qlora_counts_as_lora(tmp_path: Path):
    text = sub(LORA_SFT, ("use_qlora = false", "use_qlora = true"))
    assert load(tmp_path, text, "sft").resolved["hyperparameters"]["lora_target_modules"] == ["all-linear"]


def test_vl_sft_full_finetune_has_no_lora_targets(tmp_path: Path):
    assert "lora_target_modules" not in load(tmp_path, VL_SFT, "sft").resolved["hyperparameters"]


# ---------------------------------------------------------------------------- thinking


def test_thinking_mode_on_non_thinking_model_warns(tmp_path: Path):
    text = sub(RL, ("temperature = 0.7", 'temperature = 0.7\nthinking_mode = "think"\nthinking_budget = 256'))
    loaded = load(tmp_path, text, "rl")
    (warning,) = loaded.warnings
    assert warning.key == "[rollout.policy_config].thinking_mode"
    assert "is not a thinking model" in warning.message
    assert loaded.resolved["rollout"]["policy_config"]["thinking_mode"] == "think"  # still forwarded


@pytest.mark.parametrize("model", ["Qwen/Qwen3-VL-4B-Thinking", "Qwen/Qwen3-4B-Thinking-2507",
                                   "Qwen/Qwen3-30B-A3B-Thinking-2507-FP8"])
def test_thinking_mode_on_thinking_model_is_accepted(tmp_path: Path, model: str):
    text = sub(RL, ('base = "Qwen/Qwen3-4B"', f'base = "{model}"'),
               ("temperature = 0.7", 'temperature = 0.7\nthinking_mode = "think"\nthinking_budget = 512'),
               ("max_concurrent_rollouts = 2", 'max_concurrent_rollouts = 2\nthinking_mode = "no_think"'))
    loaded = load(tmp_path, text, "rl", allow_experimental=True)
    assert not loaded.warnings
    assert loaded.resolved["rollout"]["policy_config"]["thinking_budget"] == 512


def test_thinking_mode_in_evaluation_warns_on_text_model(tmp_path: Path):
    text = sub(RL, ("seeds = [0, 1, 2, 3]", 'seeds = [0, 1, 2, 3]\nthinking_mode = "think"'))
    (warning,) = load(tmp_path, text, "rl").warnings
    assert warning.key == "[evaluation].thinking_mode"


def test_eval_thinking_rules(tmp_path: Path):
    text = sub(EVAL, ("temperature = 0.0", 'temperature = 0.0\nthinking_mode = "think"'))
    (warning,) = load(tmp_path, text, "eval").warnings
    assert warning.key == "[eval.policy_config].thinking_mode"
    thinking = sub(text, ('model = "Qwen/Qwen3-4B"', 'model = "qwen/qwen3-vl-8b-thinking"'))
    loaded = load(tmp_path, thinking, "eval")
    assert not loaded.warnings and loaded.resolved["model"] == "Qwen/Qwen3-VL-8B-Thinking"


def test_eval_unknown_model_is_allowed_at_the_configs_own_endpoint(tmp_path: Path):
    """eval may target any OpenAI-compatible model at its `inference_url`: no registry check, no thinking/vision
    rules. Without one a Synth backend serves the model, and the registry decides (as for train)."""
    text = sub(EVAL, ('model = "Qwen/Qwen3-4B"', 'model = "gpt-4o-mini"'),
               ("temperature = 0.0", 'temperature = 0.0\nthinking_mode = "think"\nuse_vision = true\n'
                                     'inference_url = "https://api.openai.com/v1/chat/completions"'))
    loaded = load(tmp_path, text, "eval")
    assert loaded.resolved["model"] == "gpt-4o-mini" and not loaded.warnings
    with pytest.raises(ConfigError) as info:
        load(tmp_path, sub(EVAL, ('model = "Qwen/Qwen3-4B"', 'model = "gpt-4o-mini"')), "eval")
    assert [(i.key, i.message) for i in info.value.issues] == [
        ("[eval].model", "Model 'gpt-4o-mini' is not supported.")]


def test_eval_model_flag_override(tmp_path: Path):
    loaded = load(tmp_path, EVAL, "eval", model="qwen/qwen3-8b")
    assert loaded.resolved["model"] == "Qwen/Qwen3-8B"


def test_eval_seeds_normalised(tmp_path: Path):
    loaded = load(tmp_path, sub(EVAL, ("seeds = [0, 1, 2]", 'seeds = ["0-2", "5,7", 9]')), "eval")
    assert loaded.resolved["seeds"] == [0, 1, 2, 5, 7, 9]
    loaded = load(tmp_path, sub(EVAL, ("seeds = [0, 1, 2]", 'seeds = "1,2"')), "eval")
    assert loaded.resolved["seeds"] == [1, 2]


def test_eval_without_eval_table(tmp_path: Path):
    loaded = load(tmp_path, 'app_id = "math"\nmodel = "Qwen/Qwen3-4B"\nseeds = "0-3"\n', "eval")
    assert loaded.resolved["seeds"] == [0, 1, 2, 3]
    assert (loaded.resolved["concurrency"], loaded.resolved["max_llm_calls"]) == (1, 10)
    assert loaded.resolved["trace_format"] == "structured"


# ---------------------------------------------------------------------------- task URL precedence


@pytest.mark.parametrize("flag,env,expected", [
    ("http://flag:1/", {"TASK_APP_URL": "http://env:2", "TASK_APP_BASE_URL": "http://base:3"}, "http://flag:1"),
    (None, {"TASK_APP_URL": "http://env:2/", "TASK_APP_BASE_URL": "http://base:3"}, "http://env:2"),
    (None, {"TASK_APP_BASE_URL": "http://base:3"}, "http://base:3"),
    (None, {}, "http://127.0.0.1:8001"),
    (None, {"TASK_APP_URL": "  "}, "http://127.0.0.1:8001"),
], ids=["flag", "TASK_APP_URL", "TASK_APP_BASE_URL", "config", "blank-env"])
def test_task_url_precedence(tmp_path: Path, flag, env, expected):
    loaded = load(tmp_path, RL, "rl", task_url=flag, environ=env)
    assert loaded.task_url == expected
    assert loaded.resolved["services"]["task_url"] == expected


def test_task_url_precedence_through_train(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "work" / "rl.toml"
    path.write_text(RL)
    monkeypatch.setenv("TASK_APP_BASE_URL", "http://base:3")
    doc = run_cli("--json", "train", "--dry-run", "--config", str(path)).json()
    assert doc["task_url"] == "http://base:3"
    monkeypatch.setenv("TASK_APP_URL", "http://env:2")
    doc = run_cli("--json", "train", "--dry-run", "--config", str(path)).json()
    assert doc["task_url"] == "http://env:2"
    doc = run_cli("--json", "train", "--dry-run", "--config", str(path), "--task-url", "http://flag:1/").json()
    assert doc["task_url"] == "http://flag:1"
    create = doc["requests"][-1]["json"]
    assert create["data"]["endpoint_base_url"] == "http://flag:1"
    assert create["data"]["config"]["services"]["task_url"] == "http://flag:1"


def test_model_flag_through_train(tmp_path: Path):
    path = tmp_path / "work" / "rl.toml"
    path.write_text(RL)
    doc = run_cli("--json", "train", "--dry-run", "--config", str(path), "--model", "FT:qwen/qwen3-4b:job_5").json()
    create = doc["requests"][-1]["json"]
    assert doc["model"] == "ft:Qwen/Qwen3-4B:job_5"
    assert create["data"]["model"] == "ft:Qwen/Qwen3-4B:job_5" and "base_model" not in create["data"]
    assert "base" not in create["data"]["config"]["model"]


# ---------------------------------------------------------------------------- dataset paths


def test_relative_dataset_resolves_from_working_directory_then_config_folder(tmp_path: Path):
    work = tmp_path / "work"
    folder = work / "cfgs"
    folder.mkdir()
    config = folder / "sft.toml"
    config.write_text(sub(SFT, ('data = "train.jsonl"', 'data = "d.jsonl"'),
                          ("[hyperparameters]\n", '[data]\nvalidation_path = "v.jsonl"\n\n[hyperparameters]\n')))
    (folder / "d.jsonl").write_text("{}\n")
    (folder / "v.jsonl").write_text("{}\n")
    ctx = ResolveContext(environ={}, require_dataset=True)
    loaded = load_config(config, "sft", ctx)
    assert loaded.dataset == folder / "d.jsonl" and loaded.validation_dataset == folder / "v.jsonl"
    (work / "d.jsonl").write_text("{}\n")  # the working directory wins, as in synth-ai 0.2.17
    assert load_config(config, "sft", ctx).dataset == work / "d.jsonl"
    flag = load_config(config, "sft", ResolveContext(environ={}, require_dataset=True, dataset="cfgs/v.jsonl"))
    assert flag.dataset == folder / "v.jsonl"
