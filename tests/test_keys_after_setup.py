"""Keys after `synth-ai setup --local` (issue 37 items 4 and 5): every command that needs ENVIRONMENT_API_KEY finds
the one setup saved, in `./.env` or in `<data dir>/config.json`, with nothing exported by hand.

Real parts throughout: the real `setup --local`, `synth-ai serve` as its own process, and `task-app validate` /
`task-app info` through the real CLI. The test process's environment holds no key (the autouse home fixture
removes it), so each key below can only have come from the files setup wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import free_port, run_cli
from eval_support import answering_policy, write_config
from taskapp_support import scripted_model, stop, subprocess_env, synth_ai_command, wait_for_health

from synth_ai.env.dotenv_files import read_env_file
from synth_ai.env.environment_key import resolve_environment_key
from synth_ai.errors import ExitCode


def _setup_local(folder: Path) -> str:
    """`synth-ai setup --local` run in `folder`; the ENVIRONMENT_API_KEY it saved."""
    result = run_cli("setup", "--local")
    assert result.exit_code == 0, result.stderr
    key = read_env_file(folder / ".env")["ENVIRONMENT_API_KEY"]
    assert "ENVIRONMENT_API_KEY" not in os.environ
    return key


def _setup_then_another_folder(isolated_home: Path, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """`setup --local` in the usual folder, and an empty folder with no `.env` in it or above it."""
    key = _setup_local(isolated_home)
    # eval and deploy set the key they found as this process's ENVIRONMENT_API_KEY: teardown removes it again
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "recorded-for-teardown")
    monkeypatch.delenv("ENVIRONMENT_API_KEY")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return key, elsewhere


def _serve(cwd: Path, **env: str) -> tuple[subprocess.Popen, str]:
    """`synth-ai serve math-single-step` as its own process, from `cwd`, with no ENVIRONMENT_API_KEY exported."""
    port = free_port()
    child_env = subprocess_env(isolated=True, **env)
    assert "ENVIRONMENT_API_KEY" not in child_env
    process = subprocess.Popen([*synth_ai_command(), "serve", "math-single-step", "--port", str(port)], cwd=cwd,
                               env=child_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    return process, f"http://127.0.0.1:{port}"


def test_validate_and_info_right_after_setup_read_the_env_file_it_wrote(isolated_home: Path) -> None:
    key = _setup_local(isolated_home)
    process, url = _serve(isolated_home)
    try:
        wait_for_health(url, key, process=process)
        validated = run_cli("--json", "task-app", "validate", "--url", url, "--min-instances", "2")
        assert validated.exit_code == 0, validated.stdout + validated.stderr
        assert json.loads(validated.stdout)["ok"] is True
        info = run_cli("--json", "task-app", "info", "--base", url, "--seed", "1")
        assert info.exit_code == 0, info.stdout + info.stderr
    finally:
        output = stop(process)
    assert key not in output + validated.stdout + validated.stderr + info.stdout + info.stderr


def test_serve_from_another_folder_uses_the_key_setup_saved_in_the_data_dir(
        isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key, elsewhere = _setup_then_another_folder(isolated_home, tmp_path, monkeypatch)
    process, url = _serve(elsewhere)
    try:
        wait_for_health(url, key, process=process)  # it serves, and with the saved key
        monkeypatch.chdir(elsewhere)  # no .env here or above: validate and eval find the key in config.json
        validated = run_cli("task-app", "validate", "--url", url, "--min-instances", "1")
        assert validated.exit_code == 0, validated.stdout + validated.stderr
        with scripted_model(answering_policy()) as (model_url, _):
            config = write_config(tmp_path / "eval.toml", model_url, task_app_url=url, seeds="0")
            evaluated = run_cli("--json", "eval", "--config", str(config))
        assert evaluated.exit_code == 0, evaluated.stdout + evaluated.stderr
        assert [r["official_score"] for r in evaluated.json()["results"]] == [1.0]
    finally:
        output = stop(process)
    assert "is not set" not in output and key not in output + evaluated.stdout + evaluated.stderr


def test_deploy_from_another_folder_passes_the_saved_key_to_modal_by_name(
        isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key, elsewhere = _setup_then_another_folder(isolated_home, tmp_path, monkeypatch)
    monkeypatch.chdir(elsewhere)
    result = run_cli("--json", "deploy", "crafter", "--dry-run")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "ENVIRONMENT_API_KEY" in json.loads(result.stdout)["environ_secret_names"]
    assert "is not set" not in result.stderr and key not in result.stdout + result.stderr


def test_with_no_key_anywhere_validate_still_says_how_to_get_one(isolated_home: Path) -> None:
    result = run_cli("task-app", "validate", "--url", f"http://127.0.0.1:{free_port()}")
    assert result.exit_code == ExitCode.AUTH
    assert "Missing API key" in result.stderr and "synth-ai setup --local" in result.stderr


def test_the_resolver_reads_environment_then_env_files_then_config_json(isolated_home: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    config = Path(os.environ["SYNTH_AI_HOME"]) / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"ENVIRONMENT_API_KEY": "from-config-json-key"}))
    assert resolve_environment_key().value == "from-config-json-key"
    assert resolve_environment_key().source == str(config)

    (isolated_home / ".env").write_text("DEV_ENVIRONMENT_API_KEY=from-dotenv-key\n"
                                        "ENVIRONMENT_API_KEY_ALIASES=alias-one, from-dotenv-key\n")
    nested = isolated_home / "sub" / "dir"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)  # the nearest .env, walking up
    found = resolve_environment_key()
    assert (found.value, found.source, found.aliases) == ("from-dotenv-key", str(isolated_home / ".env"),
                                                          ("alias-one",))
    given = isolated_home / "given.env"
    given.write_text("ENVIRONMENT_API_KEY=from-given-file\n")
    assert resolve_environment_key([given]).value == "from-given-file"  # --env-file instead of the nearest .env

    monkeypatch.setenv("ENVIRONMENT_API_KEY", "from-environment-key")
    assert resolve_environment_key([given]).value == "from-environment-key"
