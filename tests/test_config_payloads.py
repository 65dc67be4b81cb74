"""Golden request bodies for every example config, and the reference's shape facts checked one by one.

The bodies under `tests/golden/` are what `POST /rl/jobs` (RL examples) and `POST /learning/jobs` (SFT examples)
would carry, built with a fixed backend URL and fixed fake file ids; eval and filter examples are pinned by their
resolved config. The comparison is exact.

To regenerate the files after an intended change, run

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_config_payloads.py

and review the diff of `tests/golden/` before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from synth_ai.config.common import ResolveContext
from synth_ai.config.loader import load_config
from synth_ai.train.request_bodies import build_rl_payload, build_sft_payload

GOLDEN = Path(__file__).parent / "golden"
EXAMPLES = REPO_ROOT / "examples" / "configs"
API_BASE = "https://backend.example.test/api"
TRAINING_FILE_ID = "file-golden-train-0001"
VALIDATION_FILE_ID = "file-golden-validation-0001"
EXPERIMENTAL_EXAMPLES = {"rl_thinking_qwen3_4b.toml"}

DATA = Path(__file__).parent / "data" / "broken_configs"
RL_BASE = (DATA / "rl_base.toml").read_text()
SFT_BASE = (DATA / "sft_base.toml").read_text()


def _example_files() -> list[Path]:
    return sorted(EXAMPLES.glob("*.toml"))


def _load_example(path: Path):
    ctx = ResolveContext(environ={}, allow_experimental=path.name in EXPERIMENTAL_EXAMPLES)
    return load_config(path, None, ctx)


def _body(path: Path) -> tuple[str, dict]:
    loaded = _load_example(path)
    if loaded.kind == "rl":
        return "rl_jobs", build_rl_payload(loaded, api_base=API_BASE)
    if loaded.kind == "sft":
        validation = [VALIDATION_FILE_ID] if loaded.validation_dataset is not None else None
        return "learning_jobs", build_sft_payload(loaded, training_file_id=TRAINING_FILE_ID,
                                                  validation_file_ids=validation)
    return "resolved", loaded.resolved


@pytest.fixture(autouse=True)
def _run_from_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # Example datasets are named relative to the repository root, as a user running the examples would.
    monkeypatch.chdir(REPO_ROOT)


def test_every_example_has_a_golden():
    names = {p.stem for p in _example_files()}
    assert names, "no example configs found"
    goldens = {p.name.split(".")[0] for p in GOLDEN.glob("*.json")}
    assert names <= goldens or os.environ.get("UPDATE_GOLDEN") == "1", sorted(names - goldens)


@pytest.mark.parametrize("path", _example_files(), ids=lambda p: p.stem)
def test_golden_body(path: Path):
    label, body = _body(path)
    golden = GOLDEN / f"{path.stem}.{label}.json"
    text = json.dumps(body, indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.is_file(), f"missing {golden.name}: run with UPDATE_GOLDEN=1 to create it"
    assert json.loads(golden.read_text()) == body
    assert golden.read_text() == text  # same key order and formatting, so diffs stay readable


# ---------------------------------------------------------------------------- RL shape facts (reference §2.2)


def _rl(tmp_path: Path, text: str = RL_BASE, **ctx):
    path = tmp_path / "rl.toml"
    path.write_text(text)
    return load_config(path, "rl", ResolveContext(**{"environ": {}, **ctx}))


def test_rl_payload_shape(tmp_path: Path):
    loaded = _rl(tmp_path, task_url="http://127.0.0.1:9001/")
    body = build_rl_payload(loaded, api_base=API_BASE)
    assert list(body) == ["job_type", "compute", "data", "tags", "metadata"]
    assert body["job_type"] == "rl"
    assert body["compute"] == {"gpu_type": "H100", "gpu_count": 2}
    assert body["data"]["endpoint_base_url"] == "http://127.0.0.1:9001"  # no trailing slash
    assert body["data"]["config"] == loaded.resolved
    assert body["data"]["config"]["services"]["task_url"] == "http://127.0.0.1:9001"  # effective URL written back
    assert body["data"]["base_model"] == "Qwen/Qwen3-4B" and "model" not in body["data"]
    assert body["tags"] == {"source": "train-cli"}
    assert body["metadata"] == {"backend_base_url": API_BASE}
    config = body["data"]["config"]
    assert config["reference"] == {"placement": "none"}
    assert config["topology"]["reference_placement"] == "none"
    assert config["training"]["weight_sync"] == {"enable": True, "mode": "direct", "targets": ["policy"],
                                                 "interval": 1}
    assert config["evaluation"]["seeds"] == [0, 1, 2, 3]


def test_rl_payload_canonicalises_the_base_model(tmp_path: Path):
    loaded = _rl(tmp_path, RL_BASE.replace('base = "Qwen/Qwen3-4B"', 'base = "qwen/QWEN3-4b"'))
    body = build_rl_payload(loaded, api_base=API_BASE)
    assert body["data"]["base_model"] == "Qwen/Qwen3-4B"
    assert body["data"]["config"]["model"]["base"] == "Qwen/Qwen3-4B"


def test_rl_payload_with_source_sends_model(tmp_path: Path):
    text = RL_BASE.replace('base = "Qwen/Qwen3-4B"', 'source = "ft:qwen/qwen3-4b:job_42"')
    body = build_rl_payload(_rl(tmp_path, text), api_base=API_BASE)
    assert body["data"]["model"] == "ft:Qwen/Qwen3-4B:job_42" and "base_model" not in body["data"]
    assert body["data"]["config"]["model"]["source"] == "ft:Qwen/Qwen3-4B:job_42"


@pytest.mark.parametrize("override,expected", [("rl:Qwen/Qwen3-1.7B:job_7", "rl:Qwen/Qwen3-1.7B:job_7"),
                                               ("qwen/qwen3-8b", "Qwen/Qwen3-8B")])
def test_rl_model_flag_becomes_source(tmp_path: Path, override: str, expected: str):
    loaded = _rl(tmp_path, model=override)
    body = build_rl_payload(loaded, api_base=API_BASE)
    assert body["data"]["model"] == expected and "base_model" not in body["data"]
    model = body["data"]["config"]["model"]
    assert model["source"] == expected and "base" not in model
    assert model["trainer_mode"] == "full" and model["label"] == "base-rl"


def test_rl_model_flag_replaces_both_source_and_base(tmp_path: Path):
    """--model wins even over a file that (wrongly) sets both."""
    text = RL_BASE.replace('base = "Qwen/Qwen3-4B"', 'base = "Qwen/Qwen3-4B"\nsource = "ft:Qwen/Qwen3-4B:old"')
    loaded = _rl(tmp_path, text, model="Qwen/Qwen3-0.6B")
    assert loaded.resolved["model"]["source"] == "Qwen/Qwen3-0.6B" and "base" not in loaded.resolved["model"]


def test_rl_model_flag_with_policy_table(tmp_path: Path):
    text = RL_BASE.replace('[model]\nbase = "Qwen/Qwen3-4B"', '[policy]\nmodel_name = "Qwen/Qwen3-4B"')
    loaded = _rl(tmp_path, text, model="ft:Qwen/Qwen3-4B:j1")
    body = build_rl_payload(loaded, api_base=API_BASE)
    policy = body["data"]["config"]["policy"]
    assert policy["source"] == "ft:Qwen/Qwen3-4B:j1" and "model_name" not in policy
    assert body["data"]["model"] == "ft:Qwen/Qwen3-4B:j1"


def test_rl_policy_table_base_model(tmp_path: Path):
    text = RL_BASE.replace('[model]\nbase = "Qwen/Qwen3-4B"', '[policy]\nmodel_name = "qwen/qwen3-4b"')
    loaded = _rl(tmp_path, text)
    body = build_rl_payload(loaded, api_base=API_BASE)
    assert body["data"]["base_model"] == "Qwen/Qwen3-4B"
    assert body["data"]["config"]["policy"]["model_name"] == "Qwen/Qwen3-4B"
    assert body["data"]["config"]["policy"]["max_tokens"] == 512  # [policy] defaults of the reference


# ---------------------------------------------------------------------------- SFT shape facts (reference §2.3)


def _sft(tmp_path: Path, text: str = SFT_BASE, **ctx):
    (tmp_path / "work" / "train.jsonl").write_text('{"messages": []}\n')
    path = tmp_path / "work" / "sft.toml"
    path.write_text(text)
    return load_config(path, "sft", ResolveContext(**{"environ": {}, **ctx}))


def test_sft_payload_shape(tmp_path: Path):
    body = build_sft_payload(_sft(tmp_path), training_file_id="file-1")
    assert list(body) == ["model", "hyperparameters", "training_type", "metadata", "training_file_id"]
    assert body["model"] == "Qwen/Qwen3-4B"
    assert body["training_type"] == "sft_offline"
    assert body["training_file_id"] == "file-1"
    assert body["hyperparameters"] == {
        "n_epochs": 1, "per_device_batch": 2, "gradient_accumulation_steps": 4, "sequence_length": 2048,
        "learning_rate": 1e-5, "warmup_ratio": 0.05, "train_kind": "fft",
        "parallelism": {"use_deepspeed": True, "deepspeed_stage": 2, "bf16": True},
    }
    assert body["metadata"] == {"effective_config": {
        "compute": {"gpu_type": "H100", "gpu_count": 2, "nodes": 1},
        "training": {"mode": "full_finetune", "use_qlora": False},
    }}


def test_sft_training_file_id_is_null_before_upload(tmp_path: Path):
    assert build_sft_payload(_sft(tmp_path))["training_file_id"] is None


def test_sft_step_count_instead_of_epochs(tmp_path: Path):
    loaded = _sft(tmp_path, SFT_BASE.replace("n_epochs = 1", "total_steps = 50"))
    hyper = build_sft_payload(loaded)["hyperparameters"]
    assert hyper["total_steps"] == 50 and "n_epochs" not in hyper


def test_sft_validation_hyperparameters(tmp_path: Path):
    text = SFT_BASE.replace("[hyperparameters]\n", "[training.validation]\neval_steps = 25\n\n[hyperparameters]\n")
    body = build_sft_payload(_sft(tmp_path, text), training_file_id="f", validation_file_ids=["v1"])
    hyper = body["hyperparameters"]
    assert {k: hyper[k] for k in ("evaluation_strategy", "eval_steps", "save_best_model_at_end",
                                  "metric_for_best_model", "greater_is_better")} == {
        "evaluation_strategy": "steps", "eval_steps": 25, "save_best_model_at_end": True,
        "metric_for_best_model": "val.loss", "greater_is_better": False}
    effective = body["metadata"]["effective_config"]
    assert effective["training"]["validation"] == {"enabled": True}
    assert effective["data"]["validation_files"] == ["v1"]


def test_sft_validation_disabled_and_overrides(tmp_path: Path):
    text = SFT_BASE.replace("[hyperparameters]\n", "[training.validation]\nenabled = false\n"
                            'metric_for_best_model = "val.acc"\ngreater_is_better = true\n\n[hyperparameters]\n')
    body = build_sft_payload(_sft(tmp_path, text))
    assert body["hyperparameters"]["metric_for_best_model"] == "val.acc"
    assert body["hyperparameters"]["greater_is_better"] is True
    assert body["hyperparameters"]["eval_steps"] == 0
    assert body["metadata"]["effective_config"]["training"]["validation"] == {"enabled": False}
    assert "data" not in body["metadata"]["effective_config"]  # no validation upload, no topology


def test_sft_no_validation_section_adds_nothing(tmp_path: Path):
    body = build_sft_payload(_sft(tmp_path))
    assert "evaluation_strategy" not in body["hyperparameters"]


def test_sft_effective_compute_keeps_only_three_keys(tmp_path: Path):
    text = SFT_BASE.replace("nodes = 1", 'nodes = 1\n\n[compute.topology]\ntype = "x"')
    body = build_sft_payload(_sft(tmp_path, text))
    assert body["metadata"]["effective_config"]["compute"] == {"gpu_type": "H100", "gpu_count": 2, "nodes": 1}


def test_sft_data_topology_kept(tmp_path: Path):
    body = build_sft_payload(_sft(tmp_path, SFT_BASE + "\n[data.topology]\ncontainer_count = 2\n"))
    assert body["metadata"]["effective_config"]["data"] == {"topology": {"container_count": 2}}


def test_sft_lora_keys_kept(tmp_path: Path):
    text = (SFT_BASE.replace('variety = "fft"', 'variety = "lora"').replace('mode = "full_finetune"', 'mode = "lora"')
            + '\n[lora]\nr = 8\nalpha = 16\ndropout = 0.1\ntarget_modules = ["q_proj", "v_proj"]\n')
    body = build_sft_payload(_sft(tmp_path, text))
    hyper = body["hyperparameters"]
    assert hyper["train_kind"] == "peft"
    assert (hyper["lora_rank"], hyper["lora_alpha"], hyper["lora_dropout"]) == (8, 16, 0.1)
    assert hyper["lora_target_modules"] == ["q_proj", "v_proj"]  # text model: no projector added
    assert body["metadata"]["effective_config"]["lora"] == {"r": 8, "alpha": 16, "dropout": 0.1,
                                                            "target_modules": ["q_proj", "v_proj"]}


def test_sft_lora_hyperparameter_keys_kept(tmp_path: Path):
    text = (SFT_BASE.replace('variety = "fft"', 'variety = "lora"').replace('mode = "full_finetune"', 'mode = "lora"')
            .replace("warmup_ratio = 0.05", 'warmup_ratio = 0.05\nlora_rank = 4\nlora_target_modules = ["o_proj"]'))
    body = build_sft_payload(_sft(tmp_path, text))
    assert body["hyperparameters"]["lora_rank"] == 4
    assert body["metadata"]["effective_config"]["lora"] == {"r": 4, "target_modules": ["o_proj"]}


def test_sft_explicit_train_kind_wins(tmp_path: Path):
    text = SFT_BASE.replace("warmup_ratio = 0.05", 'warmup_ratio = 0.05\ntrain_kind = "sft"')
    assert build_sft_payload(_sft(tmp_path, text))["hyperparameters"]["train_kind"] == "sft"


def test_sft_vision_model_config_kept(tmp_path: Path):
    text = SFT_BASE.replace('model = "Qwen/Qwen3-4B"', 'model = "Qwen/Qwen3-VL-8B-Instruct"') + (
        "\n[model_config]\nmax_images_per_message = 2\nmax_model_len = 8192\n")
    body = build_sft_payload(_sft(tmp_path, text))
    assert body["model"] == "Qwen/Qwen3-VL-8B-Instruct"
    assert body["metadata"]["effective_config"]["model_config"] == {
        "supports_vision": True, "max_images_per_message": 2, "vision_processor_id": "Qwen/Qwen3-VL-8B-Instruct",
        "max_model_len": 8192}


def test_sft_model_flag_overrides_job_model(tmp_path: Path):
    body = build_sft_payload(_sft(tmp_path, model="qwen/qwen3-1.7b"))
    assert body["model"] == "Qwen/Qwen3-1.7B"


def test_sft_top_level_model_string_accepted(tmp_path: Path):
    text = SFT_BASE.replace('[job]\nmodel = "Qwen/Qwen3-4B"\ndata = "train.jsonl"\n', "")
    text = 'model = "Qwen/Qwen3-0.6B"\n' + text
    assert build_sft_payload(_sft(tmp_path, text))["model"] == "Qwen/Qwen3-0.6B"
