"""`synth-ai setup --local`: keys for the embedded backend and task apps, registered, saved, idempotent."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import httpx
import pytest

from backend_support import BackendProcess
from conftest import run_cli
from synth_ai.env import backend_keys as auth
from synth_ai.env.dotenv_files import read_env_file
from synth_ai.errors import ExitCode

HOSTED_KEY = "sk_live_PLANTEDhostedKEY123456"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def data_dir(isolated_home: Path) -> Path:
    return isolated_home.parent / "home" / ".synth-ai"


def snapshot(*paths: Path) -> list[tuple[bytes, int, int]]:
    return [(p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in paths]


def test_local_twice_is_idempotent_and_registered(isolated_home: Path) -> None:
    first = run_cli("setup", "--local")
    assert first.exit_code == 0, first.stderr
    env, cfg = isolated_home / ".env", data_dir(isolated_home) / "config.json"
    values = read_env_file(env)
    synth, env_key = values["SYNTH_API_KEY"], values["ENVIRONMENT_API_KEY"]
    assert synth.startswith("sk_local_") and re.fullmatch(r"[0-9a-f]{64}", env_key)
    assert json.loads(cfg.read_text()) == {"ENVIRONMENT_API_KEY": env_key, "SYNTH_API_KEY": synth}
    assert mode(env) == 0o600 and mode(cfg) == 0o600
    assert synth in auth.accepted_keys() and env_key in auth.environment_keys(environ={})
    assert "created and registered with the embedded backend" in first.stdout
    for secret in (synth, env_key):
        assert secret not in first.stdout + first.stderr

    before = snapshot(env, cfg, auth.keys_path(), data_dir(isolated_home) / auth.ENV_KEYS_FILE)
    second = run_cli("setup", "--local", "--json")
    assert second.exit_code == 0, second.stderr
    doc = second.json()
    assert doc["unchanged"] is True and doc["changed"] is False
    assert [k["action"] for k in doc["keys"]] == ["reused", "reused"]
    assert snapshot(env, cfg, auth.keys_path(), data_dir(isolated_home) / auth.ENV_KEYS_FILE) == before
    assert synth not in second.stdout + second.stderr and env_key not in second.stdout + second.stderr
    third = run_cli("setup", "--local")
    assert "Already set up: nothing changed." in third.stdout


@pytest.mark.parametrize("args", [("setup", "--local"), ("backend", "status")])
def test_data_folder_that_cannot_be_made_is_invalid_input(isolated_home: Path, monkeypatch: pytest.MonkeyPatch,
                                                          args: tuple[str, ...]) -> None:
    blocker = isolated_home / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SYNTH_AI_HOME", str(blocker / "data"))
    result = run_cli("--json", *args)
    assert result.exit_code == ExitCode.INVALID_INPUT, result.stdout
    error = json.loads(result.stdout)["error"]
    assert "SYNTH_AI_HOME" in error["message"] and str(blocker / "data") in error["message"]


def test_local_keeps_the_rest_of_an_existing_env_file(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    env.write_text("# mine\nexport OPENAI_API_KEY=sk-openai-keep-me\nDEV_ENVIRONMENT_API_KEY=my-task-app-key-123\n")
    env.chmod(0o600)
    result = run_cli("setup", "--local")
    assert result.exit_code == 0, result.stderr
    lines = env.read_text().splitlines()
    assert lines[:3] == ["# mine", "export OPENAI_API_KEY=sk-openai-keep-me",
                         "DEV_ENVIRONMENT_API_KEY=my-task-app-key-123"]
    values = read_env_file(env)
    assert values["ENVIRONMENT_API_KEY"] == "my-task-app-key-123"  # the alias' value is reused, not replaced
    assert "my-task-app-key-123" in auth.environment_keys(environ={})


def test_saved_local_key_unknown_to_the_backend_is_registered_again(isolated_home: Path) -> None:
    assert run_cli("setup", "--local").exit_code == 0
    env = isolated_home / ".env"
    synth = read_env_file(env)["SYNTH_API_KEY"]
    auth.keys_path().unlink()  # e.g. the data dir was reset
    before = env.read_bytes()
    result = run_cli("setup", "--local")
    assert result.exit_code == 0, result.stderr
    assert "SYNTH_API_KEY=sk_l" in result.stdout and ": registered with the embedded backend" in result.stdout
    assert env.read_bytes() == before
    assert synth in auth.accepted_keys()


def test_hosted_key_is_not_replaced_without_force_and_nothing_prompts(isolated_home: Path) -> None:
    env = isolated_home / ".env"
    env.write_text(f"SYNTH_API_KEY={HOSTED_KEY}\n")
    env.chmod(0o600)
    result = run_cli("setup", "--local")  # stdin is not a terminal here: it must fail, not ask
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "not a key of the embedded backend" in result.stderr and "--force" in result.stderr
    assert HOSTED_KEY not in result.stdout + result.stderr
    assert env.read_text() == f"SYNTH_API_KEY={HOSTED_KEY}\n"
    assert not (data_dir(isolated_home) / "config.json").exists()

    forced = run_cli("setup", "--local", "--force")
    assert forced.exit_code == 0, forced.stderr
    synth = read_env_file(env)["SYNTH_API_KEY"]
    assert synth.startswith("sk_local_") and synth in auth.accepted_keys()
    assert "(replaced sk_l…56)" in forced.stdout
    assert HOSTED_KEY not in forced.stdout + forced.stderr


def test_env_file_flag_and_shell_variable_warning(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "shell-value-that-differs-0001")
    result = run_cli("setup", "--local", "--env-file", "conf/local.env")
    assert result.exit_code == ExitCode.INVALID_INPUT  # the folder does not exist
    (isolated_home / "conf").mkdir()
    result = run_cli("setup", "--local", "--env-file", "conf/local.env")
    assert result.exit_code == 0, result.stderr
    assert (isolated_home / "conf" / "local.env").is_file() and not (isolated_home / ".env").exists()
    assert "ENVIRONMENT_API_KEY is also set in your environment (shel…01)" in result.stderr
    assert "shell-value-that-differs-0001" not in result.stdout + result.stderr


def test_running_backend_accepts_the_written_key(isolated_home: Path) -> None:
    backend = BackendProcess(data_dir(isolated_home)).start()
    try:
        result = run_cli("setup", "--local")  # the backend is already running: it re-reads its key file
        assert result.exit_code == 0, result.stderr
        synth = read_env_file(isolated_home / ".env")["SYNTH_API_KEY"]
        assert synth != backend.key  # a key of its own, next to the backend's default
        ok = httpx.get(f"{backend.url}/api/files", headers={"Authorization": f"Bearer {synth}"}, timeout=10)
        assert ok.status_code == 200, ok.text
        bad = httpx.get(f"{backend.url}/api/files", headers={"Authorization": "Bearer sk_local_wrong"}, timeout=10)
        assert bad.status_code == 401
    finally:
        backend.stop()


def test_parent_env_file_shadowing_is_noted(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (isolated_home / ".env").write_text("A=1\n")
    sub = isolated_home / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    result = run_cli("setup", "--local")
    assert result.exit_code == 0, result.stderr
    assert "Creating ./.env; commands run from here will load it instead of" in result.stdout
    assert (isolated_home / ".env").read_text() == "A=1\n"


def test_subprocess_without_terminal_fails_instead_of_prompting(isolated_home: Path) -> None:
    import os
    import subprocess
    import sys

    (isolated_home / ".env").write_text(f"SYNTH_API_KEY={HOSTED_KEY}\n")
    proc = subprocess.run([sys.executable, "-m", "synth_ai", "setup", "--local"], stdin=subprocess.PIPE,
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert proc.returncode == ExitCode.INVALID_INPUT, proc.stderr
    assert "--force" in proc.stderr and HOSTED_KEY not in proc.stdout + proc.stderr


def test_terminal_confirmation_decides_about_a_hosted_key(isolated_home: Path) -> None:
    from synth_ai.cli.output import Output
    from synth_ai.setup.flow import SetupOptions, run_setup
    from synth_ai.setup.local_keys import ForeignKeyError

    env = isolated_home / ".env"
    env.write_text(f"SYNTH_API_KEY={HOSTED_KEY}\n")
    questions: list[str] = []
    with pytest.raises(ForeignKeyError):
        run_setup(SetupOptions(local=True), Output(json_mode=True), confirm=lambda q: questions.append(q) or False)
    assert env.read_text() == f"SYNTH_API_KEY={HOSTED_KEY}\n"
    assert questions and HOSTED_KEY not in questions[0] and questions[0].endswith("Replace it?")
    run_setup(SetupOptions(local=True), Output(json_mode=True), confirm=lambda q: True)
    assert read_env_file(env)["SYNTH_API_KEY"].startswith("sk_local_")
