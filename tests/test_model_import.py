"""`synth-ai models import` against a real embedded backend, and SFT continuing from imported and fine-tuned models
through the real CLI (`train --model imported:...` / `ft:...`), with the tiny Qwen3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend_support import TINY_TEXT
from conftest import REPO_ROOT, run_cli

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

CONFIG = REPO_ROOT / "examples" / "configs" / "sft_tiny_local.toml"
DATASET = REPO_ROOT / "examples" / "datasets" / "sft_math_small.jsonl"


@pytest.fixture
def backend(shared_backend):
    """The worker's shared backend: these tests import and train models under names of their own, and look in its
    model list only for those names."""
    return shared_backend


@pytest.fixture(autouse=True)
def backend_key(backend, monkeypatch):
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)


@pytest.fixture(scope="module")
def base_copy(shared_backend, tmp_path_factory) -> Path:
    """The tiny Qwen3 exported as a plain Hugging Face folder (what users import)."""
    out = tmp_path_factory.mktemp("exported") / "full"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SYNTH_API_KEY", shared_backend.key)
        exported = run_cli("--json", "models", "export", TINY_TEXT, "--out", str(out),
                           "--backend", shared_backend.url)
    assert exported.exit_code == 0, exported.stderr
    return out


def _import(backend, folder: Path, *extra: str):
    return run_cli("--json", "models", "import", str(folder), "--backend", backend.url, *extra)


def _train(backend, model: str, *extra: str):
    return run_cli("train", "--type", "sft", "--config", str(CONFIG), "--dataset", str(DATASET), "--model", model,
                   "--examples", "4", "--backend", backend.url, "--poll-interval", "0.2", *extra)


def test_sft_continues_from_an_imported_model_then_from_its_fine_tune(backend, base_copy):
    imported = _import(backend, base_copy, "--base", TINY_TEXT, "--name", "sft-start")
    assert imported.exit_code == 0, imported.stderr
    model_id = imported.json()["id"]
    assert model_id == "imported:synth-ai/tiny-qwen3:sft-start"

    first = _train(backend, model_id)
    assert first.exit_code == 0, first.stdout + first.stderr
    assert "Final status: succeeded" in first.stdout
    fine_tuned = next(line.split()[-1] for line in first.stdout.splitlines() if "fine_tuned_model:" in line)
    assert fine_tuned.startswith("ft:synth-ai/tiny-qwen3:job_")

    second = _train(backend, fine_tuned, "--no-poll", "--json")
    assert second.exit_code == 0, second.stdout + second.stderr
    job = run_cli("--json", "jobs", "get", json.loads(second.stdout)["job_id"], "--backend", backend.url)
    assert job.exit_code == 0, job.stderr
    assert job.json()["model"] == fine_tuned


def test_sft_from_a_fine_tuned_id_the_backend_does_not_hold_is_refused_naming_it(backend):
    missing = "ft:synth-ai/tiny-qwen3:job_doesnotexist"
    result = _train(backend, missing, "--no-poll")
    assert result.exit_code == 3, result.stdout + result.stderr
    assert missing in result.stderr


def _adapter_folder(root: Path, config_text: str, weights: bytes) -> Path:
    root.mkdir(parents=True)
    (root / "adapter_config.json").write_text(config_text)
    (root / "adapter_model.safetensors").write_bytes(weights)
    return root


GOOD_CONFIG = {"peft_type": "LORA", "base_model_name_or_path": TINY_TEXT, "r": 8, "lora_alpha": 16,
               "target_modules": ["q_proj", "v_proj"]}


def _refused(backend, folder: Path, name: str):
    result = _import(backend, folder, "--name", name)
    assert result.exit_code == 3, result.stdout + result.stderr
    listed = run_cli("--json", "models", "list", "--backend", backend.url)
    assert not any(name in m["id"] for m in listed.json()["fine_tuned"]), "a refused folder was registered"
    assert not (backend.data_dir / "models" / "imported" / name).exists()
    return result.json()["error"]


@pytest.mark.parametrize(("config_text", "weights", "named", "field"), [
    ('{"peft_type": "LORA", "r": 8,,}', b"", "adapter_config.json", "line 1"),
    (json.dumps({**GOOD_CONFIG, "r": "eight"}), bytes(range(256)) * 64, "adapter_config.json", "r is 'eight'"),
    (json.dumps({**GOOD_CONFIG, "target_modules": 7}), bytes(range(256)) * 64, "adapter_config.json",
     "target_modules is 7"),
    (json.dumps(GOOD_CONFIG), bytes(range(256)) * 64, "adapter_model.safetensors", "not a readable weights file"),
], ids=["corrupt-json", "rank-not-a-number", "target-modules-not-names", "random-bytes-as-weights"])
def test_a_broken_adapter_is_refused_at_import_naming_the_file_and_field(backend, tmp_path, config_text, weights,
                                                                         named, field):
    folder = _adapter_folder(tmp_path / "adapter", config_text, weights)
    error = _refused(backend, folder, "broken")
    assert named in error["message"] and field in error["message"], error
    assert error["code"] != "internal_error"


def test_a_full_model_with_a_corrupt_config_is_refused_naming_it(backend, base_copy, tmp_path):
    import shutil

    folder = tmp_path / "full"
    shutil.copytree(base_copy, folder)
    (folder / "config.json").write_text('{"model_type": "qwen3", ')
    error = _refused(backend, folder, "broken-full")
    assert "config.json" in error["message"] and "not valid JSON" in error["message"], error
