"""Every TOML under examples/ is a valid config of the kind its name promises, as a user would run it: from the
repository root, through `synth-ai config validate` and `train --dry-run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_cli

from synth_ai.config.common import ResolveContext
from synth_ai.config.loader import load_config

EXAMPLES = sorted((REPO_ROOT / "examples").rglob("*.toml"))
NEEDS_EXPERIMENTAL = {"rl_thinking_qwen3_4b.toml"}  # Qwen3-4B-Thinking-2507 is gated as experimental


def _expected_kind(path: Path) -> str | None:
    for kind in ("rl", "sft", "eval", "filter"):
        if path.name.startswith(f"{kind}_"):
            return kind
    return None


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)  # dataset paths in the examples are relative to the repository root


def test_there_are_examples_of_every_kind():
    kinds = {_expected_kind(p) for p in EXAMPLES}
    assert {"rl", "sft", "eval", "filter"} <= kinds
    names = {p.name for p in EXAMPLES}
    assert {"rl_text_qwen3_4b.toml", "rl_vision_qwen3_vl_4b.toml", "rl_thinking_qwen3_4b.toml",
            "sft_full_qwen3_4b.toml", "sft_lora_qwen3_vl_2b.toml", "eval_math.toml", "filter_math.toml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_example_validates(path: Path):
    ctx = ResolveContext(environ={}, allow_experimental=path.name in NEEDS_EXPERIMENTAL, require_dataset=True)
    loaded = load_config(path, None, ctx)
    if _expected_kind(path):
        assert loaded.kind == _expected_kind(path)
    assert not loaded.warnings, [w.render() for w in loaded.warnings]
    if loaded.kind == "sft":
        assert loaded.dataset is not None and loaded.dataset.is_file()
        validation = loaded.source.data.get("data", {}).get("validation_path")
        assert (loaded.validation_dataset is not None) == bool(validation)


def test_experimental_example_needs_the_flag():
    path = REPO_ROOT / "examples/configs/rl_thinking_qwen3_4b.toml"
    result = run_cli("config", "validate", str(path))
    assert result.exit_code == 3 and "experimental" in result.stdout
    assert "--allow-experimental" in result.stdout


def test_all_examples_through_the_cli():
    result = run_cli("--json", "config", "validate", "--allow-experimental", *(str(p) for p in EXAMPLES))
    assert result.exit_code == 0, result.stdout
    doc = json.loads(result.stdout)
    assert doc["valid"] is True and len(doc["files"]) == len(EXAMPLES)


@pytest.mark.parametrize("path", [p for p in EXAMPLES if _expected_kind(p) in {"rl", "sft"}],
                         ids=lambda p: p.stem)
def test_training_example_dry_runs(path: Path, tmp_path: Path):
    empty_env = tmp_path / "empty.env"  # named, so that no .env near the repository is picked up
    empty_env.write_text("")
    args = ["--json", "train", "--dry-run", "--config", str(path.relative_to(REPO_ROOT)),
            "--backend", "http://backend.test", "--env-file", str(empty_env)]
    if path.name in NEEDS_EXPERIMENTAL:
        args.append("--allow-experimental")
    result = run_cli(*args)
    assert result.exit_code == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["type"] == _expected_kind(path)
    assert doc["requests"][-1 if doc["type"] == "rl" else -2]["method"] == "POST"


def test_vision_example_follows_the_product_checklist():
    loaded = load_config(REPO_ROOT / "examples/configs/rl_vision_qwen3_vl_4b.toml", None, ResolveContext(environ={}))
    config = loaded.resolved
    assert config["model"]["base"] == "Qwen/Qwen3-VL-4B-Instruct"
    assert config["model"]["supports_vision"] is True and config["model"]["max_images_per_message"] == 1
    assert config["model"]["vision_processor_id"] == "Qwen/Qwen3-VL-4B-Instruct"
    assert config["rollout"]["use_vision"] is True and config["rollout"]["max_images_per_step"] == 1
    assert config["training"]["supports_vision"] is True
    assert config["vllm"]["limit_mm_per_prompt"] == {"image": 1}
    assert "all-linear" in config["lora"]["target_modules"]


def test_thinking_example_sets_thinking_fields():
    loaded = load_config(REPO_ROOT / "examples/configs/rl_thinking_qwen3_4b.toml", None,
                         ResolveContext(environ={}, allow_experimental=True))
    policy = loaded.resolved["rollout"]["policy_config"]
    assert policy["thinking_mode"] == "think" and policy["thinking_budget"] == 512
    assert loaded.model.base.supports_thinking


def _is_rl(path: Path) -> bool:
    import tomllib

    return tomllib.loads(path.read_text()).get("algorithm", {}).get("type") == "online"


RL_EXAMPLES = [p for p in EXAMPLES if _is_rl(p)]


@pytest.mark.parametrize("path", RL_EXAMPLES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_rl_example_says_how_to_serve_its_task_app(path: Path):
    """The leading comment names `synth-ai serve <id> --port N`: a bundled app or a verifiers environment that
    resolves, on the port `task_url` uses."""
    import re
    import tomllib
    from urllib.parse import urlsplit

    from synth_ai.taskapp.discovery import bundled_apps_dir, discover_task_apps

    lines = path.read_text().splitlines()
    header = "\n".join(line for line in lines[:next(i for i, l in enumerate(lines) if not l.startswith("#"))])
    found = re.search(r"synth-ai serve (\S+) --port (\d+)", header)
    assert found, f"{path.name}: the leading comment does not say `synth-ai serve <app-id> --port N`"
    if found.group(1).startswith("verifiers:"):
        from synth_ai.taskapp.discovery import find_task_app

        assert find_task_app(found.group(1)).path.is_file()  # the environment's module, from the repository root
    else:
        names = {name for choice in discover_task_apps(roots=[bundled_apps_dir()]) for name in choice.names()}
        assert found.group(1) in names, f"{path.name}: {found.group(1)!r} is not a bundled task app ({sorted(names)})"
    task_url = tomllib.loads(path.read_text())["services"]["task_url"]
    assert int(found.group(2)) == urlsplit(task_url).port, f"{path.name}: the port differs from {task_url}"


def test_every_rl_example_is_checked_for_its_serve_line():
    assert {"rl_vision_qwen3_vl_4b.toml", "rl_thinking_qwen3_4b.toml", "crafter_rl_vision_qwen3vl4b.toml",
            "crafter_rl_vision_qwen3vl4b_thinking.toml", "rl_tiny_local.toml", "rl_tiny_verifiers.toml",
            "rl_tiny_fsdp.toml"} <= {p.name for p in RL_EXAMPLES}
