"""Config kind inference (reference §1.2 order, extended to eval and filter), `synth-ai config schema` and
`synth-ai config validate` (exit codes, `--json` shape, `--show-resolved`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_cli

from synth_ai.config.kinds import infer_kind, infer_training_kind

DATA = Path(__file__).parent / "data" / "broken_configs"


@pytest.mark.parametrize("data,expected", [
    ({"algorithm": {"method": "policy_gradient"}}, "rl"),
    ({"algorithm": {"method": "PPO"}}, "rl"),
    ({"algorithm": {"method": "reinforce"}}, "rl"),
    ({"algorithm": {"type": "online"}}, "rl"),
    ({"algorithm": {"variety": "gspo"}}, "rl"),
    ({"algorithm": {"variety": "grpo"}}, "rl"),
    ({"algorithm": {"method": "supervised_finetune"}}, "sft"),
    ({"algorithm": {"method": "sft"}}, "sft"),
    ({"algorithm": {"type": "offline"}}, "sft"),
    ({"algorithm": {"variety": "fft"}}, "sft"),
    ({"job_type": "rl"}, "rl"),
    ({"services": {"task_url": "http://x"}}, "rl"),
    ({"services": {"environment": "crafter"}}, "rl"),
    ({"training": {"mode": "sft_offline"}}, "sft"),
    ({"training": {"mode": "sft-lora"}}, "sft"),
    ({"hyperparameters": {"train_kind": "fft"}}, "sft"),
    ({"hyperparameters": {"train_kind": "sft"}}, "sft"),
    # shaped as the product docs show SFT configs (no [algorithm])
    ({"training": {"mode": "full_finetune"}}, "sft"),
    ({"training": {"mode": "QLoRA"}}, "sft"),
    ({"training": {"mode": "lora"}, "services": {"task_url": "x"}}, "rl"),
    ({"job": {"model": "Qwen/Qwen3-4B"}, "hyperparameters": {"n_epochs": 1}}, "sft"),
    # order: the RL clues of [algorithm] come before its SFT clues, [algorithm] before everything else
    ({"algorithm": {"method": "sft", "type": "online"}}, "rl"),
    ({"algorithm": {"method": "sft", "variety": "gspo"}}, "rl"),
    ({"algorithm": {"type": "offline"}, "services": {"task_url": "http://x"}}, "sft"),
    ({"job_type": "rl", "training": {"mode": "sft_offline"}}, "rl"),
    ({"services": {"task_url": "x"}, "hyperparameters": {"train_kind": "sft"}}, "rl"),
    # not clues
    ({"type": "sft"}, None),
    ({"job_type": "sft"}, None),
    ({"job": {"model": "Qwen/Qwen3-4B"}}, None),
    ({"hyperparameters": {"n_epochs": 1}}, None),
    ({"training": {"mode": "online"}}, None),
    ({"services": {"judge_url": "x"}}, None),
    ({}, None),
    ({"algorithm": "gspo"}, None),
])
def test_training_kind_inference(data, expected):
    assert infer_training_kind(data) == expected


@pytest.mark.parametrize("data,expected", [
    ({"filter": {"db": "x"}}, "filter"),
    ({"eval": {"app_id": "a"}}, "eval"),
    ({"app_id": "a", "model": "m", "seeds": [1]}, "eval"),
    ({"app_id": "a", "seeds": [1], "algorithm": {"type": "online"}}, "rl"),
    ({"filter": {}, "algorithm": {"type": "online"}}, "filter"),
    ({"eval": {}, "algorithm": {"type": "offline"}}, "eval"),
    ({"app_id": "a"}, None),
    ({"filter": "x"}, None),
])
def test_kind_inference_with_eval_and_filter(data, expected):
    assert infer_kind(data) == expected


@pytest.mark.parametrize("name,kind", [("eval_math", "eval"), ("filter_math", "filter"), ("rl_text_qwen3_4b", "rl"),
                                       ("sft_full_qwen3_4b", "sft")])
def test_examples_are_inferred(name: str, kind: str):
    import tomllib

    assert infer_kind(tomllib.loads((REPO_ROOT / "examples" / "configs" / f"{name}.toml").read_text())) == kind


# ---------------------------------------------------------------------------- config schema


@pytest.mark.parametrize("kind,properties", [
    ("rl", {"algorithm", "services", "compute", "topology", "vllm", "model", "policy", "lora", "rollout",
            "evaluation", "training", "rubric", "judge", "tags"}),
    ("sft", {"algorithm", "job", "compute", "data", "training", "hyperparameters", "model_config", "lora", "tags"}),
    ("eval", {"app_id", "model", "seeds", "concurrency", "max_llm_calls", "trace_format", "policy_config"}),
    ("filter", {"filter"}),
])
def test_config_schema_is_json_schema(kind: str, properties: set[str]):
    result = run_cli("config", "schema", kind)
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["type"] == "object"
    assert properties <= set(schema["properties"])
    assert "$defs" in schema
    # every reference resolves, and no pydantic-only constraint names stand in for JSON Schema keywords
    text = result.stdout
    for ref in {part.split('"')[0] for part in text.split('"$ref": "#/$defs/')[1:]}:
        assert ref in schema["$defs"], ref
    _assert_no_pydantic_keywords(schema)


def _assert_no_pydantic_keywords(node, path="#"):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in {"gt", "ge", "lt", "le", "min_length", "max_length"} and not path.endswith("/properties"):
                raise AssertionError(f"{path}: '{key}' is not a JSON Schema keyword")
            _assert_no_pydantic_keywords(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _assert_no_pydantic_keywords(value, f"{path}/{index}")


def test_config_schema_details():
    rl = json.loads(run_cli("config", "schema", "rl").stdout)
    assert set(rl["required"]) == {"algorithm"}
    training = rl["$defs"]["TrainingSection"]
    assert {"num_epochs", "iterations_per_epoch", "max_turns", "batch_size", "group_size", "learning_rate",
            "weight_sync_interval", "log_interval"} <= set(training["required"])
    assert training["properties"]["batch_size"] == {"exclusiveMinimum": 0, "title": "Batch Size", "type": "integer"}
    assert {"exclusiveMinimum": 0, "type": "number"} in training["properties"]["gradient_accumulation_steps"][
        "anyOf"] or {"exclusiveMinimum": 0, "type": "integer"} in training["properties"][
        "gradient_accumulation_steps"]["anyOf"]
    model = rl["$defs"]["ModelSection"]
    assert {"trainer_mode", "label"} <= set(model["required"])
    assert {"supports_vision", "max_images_per_message", "vision_processor_id"} <= set(model["properties"])
    sft = json.loads(run_cli("config", "schema", "sft").stdout)
    assert sft["required"] == ["job"]
    hyper = sft["$defs"]["HyperparametersSection"]["properties"]
    assert {"n_epochs", "per_device_batch", "lora_rank", "parallelism"} <= set(hyper)
    assert {"maximum": 1, "minimum": 0, "type": "number"} in hyper["warmup_ratio"]["anyOf"]
    evaluation = json.loads(run_cli("config", "schema", "eval").stdout)
    assert set(evaluation["required"]) == {"app_id", "model", "seeds"}
    assert evaluation["properties"]["trace_format"]["enum"] == ["compact", "full", "structured"]
    assert evaluation["properties"]["seeds"]["minItems"] == 1
    assert evaluation["properties"]["app_id"]["minLength"] == 1
    flt = json.loads(run_cli("config", "schema", "filter").stdout)
    assert flt["required"] == ["filter"]
    assert set(flt["$defs"]["FilterConfig"]["required"]) == {"db", "output"}


def test_config_schema_with_global_json_is_one_document():
    result = run_cli("--json", "config", "schema", "sft")
    assert result.exit_code == 0 and json.loads(result.stdout)["title"] == "SFTConfig"


def test_config_schema_unknown_kind():
    result = run_cli("config", "schema", "dpo")
    assert result.exit_code == 2 and "Traceback" not in result.stderr


# ---------------------------------------------------------------------------- config validate


@pytest.fixture
def files(isolated_home: Path) -> dict[str, Path]:
    (isolated_home / "train.jsonl").write_text('{"messages": []}\n')
    made = {}
    for kind in ("rl", "sft", "eval", "filter"):
        path = isolated_home / f"{kind}.toml"
        path.write_text((DATA / f"{kind}_base.toml").read_text())
        made[kind] = path
    bad = isolated_home / "bad.toml"
    bad.write_text((DATA / "rl_base.toml").read_text().replace("batch_size = 8", "batch_size = 0"))
    made["bad"] = bad
    return made


def test_validate_all_valid_exits_0(files):
    result = run_cli("config", "validate", *(str(files[k]) for k in ("rl", "sft", "eval", "filter")))
    assert result.exit_code == 0
    for kind in ("rl", "sft", "eval", "filter"):
        assert f"✓ {kind}.toml ({kind})" in result.stdout
    assert "4 valid, 0 invalid" in result.stdout


def test_validate_one_invalid_exits_3_and_reports_every_file(files):
    result = run_cli("config", "validate", str(files["rl"]), str(files["bad"]), str(files["eval"]))
    assert result.exit_code == 3
    assert "✓ rl.toml (rl)" in result.stdout and "✓ eval.toml (eval)" in result.stdout
    assert "✗ bad.toml: 1 problem(s)" in result.stdout
    assert "bad.toml:42: [training].batch_size: expected an integer greater than zero (found 0)" in result.stdout
    assert "2 valid, 1 invalid" in result.stdout


def test_validate_json_shape(files):
    result = run_cli("--json", "config", "validate", str(files["sft"]), str(files["bad"]))
    assert result.exit_code == 3
    doc = json.loads(result.stdout)  # exactly one document; raises on anything extra
    assert set(doc) == {"files", "valid"} and doc["valid"] is False
    ok, bad = doc["files"]
    assert ok == {"path": "sft.toml", "kind": "sft", "valid": True, "issues": []}
    assert bad["path"] == "bad.toml" and bad["valid"] is False
    (issue,) = bad["issues"]
    assert issue == {"severity": "error", "message": "expected an integer greater than zero", "file": "bad.toml",
                     "key": "[training].batch_size", "line": 42, "found": 0}
    assert "{" not in result.stderr  # nothing JSON-like leaks to stderr


def test_validate_per_command_json_flag(files):
    result = run_cli("config", "validate", "--json", str(files["eval"]))
    assert result.exit_code == 0
    assert json.loads(result.stdout)["files"][0]["kind"] == "eval"
    assert result.stderr == ""


def test_validate_json_with_notes_keeps_stdout_one_document(tmp_path: Path):
    result = run_cli("--json", "config", "validate", str(REPO_ROOT / "examples/configs/sft_lora_qwen3_vl_2b.toml"))
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    severities = {i["severity"] for i in doc["files"][0]["issues"]}
    assert "note" in severities
    assert result.stderr == ""


def test_validate_kind_flag_overrides_inference(files):
    result = run_cli("config", "validate", "--kind", "sft", str(files["rl"]))
    assert result.exit_code == 3 and "but this command expects SFT" in result.stdout


def test_validate_task_url_flag(files, isolated_home: Path):
    path = isolated_home / "nourl.toml"
    path.write_text(files["rl"].read_text().replace('[services]\ntask_url = "http://127.0.0.1:8001"\n', ""))
    assert run_cli("config", "validate", str(path)).exit_code == 3
    result = run_cli("--json", "config", "validate", "--show-resolved", "--task-url", "http://10.0.0.1:9/",
                     str(path))
    assert result.exit_code == 0
    assert result.json()["files"][0]["resolved"]["services"] == {"task_url": "http://10.0.0.1:9"}


def test_validate_show_resolved(files):
    result = run_cli("--json", "config", "validate", "--show-resolved", str(files["rl"]), str(files["bad"]))
    ok, bad = result.json()["files"]
    resolved = ok["resolved"]
    assert resolved["training"]["weight_sync"]["mode"] == "direct"
    assert resolved["reference"] == {"placement": "none"}
    assert "resolved" not in bad
    human = run_cli("config", "validate", "--show-resolved", str(files["filter"]))
    assert human.exit_code == 0 and '"min_official_score": 0.5' in human.stdout
    plain = run_cli("--json", "config", "validate", str(files["rl"]))
    assert "resolved" not in plain.json()["files"][0]


def test_validate_needs_a_file():
    result = run_cli("config", "validate")
    assert result.exit_code == 2


def test_validate_unknown_kind_flag(files):
    result = run_cli("config", "validate", "--kind", "dpo", str(files["rl"]))
    assert result.exit_code == 2


def test_validate_human_output_has_no_traceback_for_any_example():
    configs = sorted(str(p) for p in (REPO_ROOT / "examples").rglob("*.toml"))
    result = run_cli("config", "validate", "--allow-experimental", *configs)
    assert "Traceback" not in result.stdout + result.stderr
