"""Bad input to `synth-ai serve verifiers:<target>`: each case gets its message (what, where, how to fix) and its
documented exit code, never a traceback unless SYNTH_DEBUG=1 asks for one; a reward function that raises fails
that rollout only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import REPO_ROOT, free_port
from taskapp_support import (
    ENV_KEY,
    completion,
    headers,
    rollout_body,
    scripted_model,
    subprocess_env,
)
from verifiers_support import ENVS, QA_ENV, ROLLOUT_TIMEOUT_S, env_args_restored, served

from synth_ai.errors import ExitCode

__all__ = ["env_args_restored"]  # the autouse fixture, used by being here


@pytest.fixture
def env_key(monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)


def run_serve(app_id: str, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`python -m synth_ai serve <app_id>` in its own process (for what must not leak into this one: an import
    that fails, offline-mode variables read at import, a traceback)."""
    return subprocess.run([sys.executable, "-m", "synth_ai", "serve", app_id, "--port", str(free_port()), *args],
                          cwd=cwd, env=subprocess_env(ENVIRONMENT_API_KEY=ENV_KEY, **env), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("app_id", [QA_ENV, "verifiers:some-env"])
def test_verifiers_not_installed_names_the_extra(tmp_path, app_id):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "verifiers.py").write_text('raise ImportError("No module named verifiers", name="verifiers")\n')
    result = run_serve(app_id, cwd=tmp_path,
                       PYTHONPATH=os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")]))
    assert result.returncode == ExitCode.UNAVAILABLE, result.stderr
    assert "Serving a verifiers environment needs the verifiers package" in result.stderr
    assert f"pip install '{REPO_ROOT}[verifiers]'" in result.stderr  # this checkout, not the index's namesake
    assert "Traceback" not in result.stderr


def test_installed_id_not_found_lists_installed_environments(cli, env_key):
    result = cli("serve", "verifiers:no-such-env", "--port", str(free_port()))
    assert result.exit_code == ExitCode.NOT_FOUND
    assert "No verifiers environment 'no-such-env' is installed (no module named 'no_such_env')" in result.stderr
    listing = result.stderr.split("Installed environments: ", 1)[1].split(".\n", 1)[0].split(", ")
    assert "none found" not in listing and listing == sorted(listing)
    assert "synth-ai" not in listing  # it offers verifiers as an extra: not an environment
    assert "verifiers:./path/to/my_env.py" in result.stderr


def test_path_not_found_names_the_path_tried(cli, env_key, isolated_home):
    result = cli("serve", "verifiers:./envs/missing_env.py", "--port", str(free_port()))
    assert result.exit_code == ExitCode.NOT_FOUND
    assert f"The verifiers environment path {isolated_home / 'envs' / 'missing_env.py'} does not exist." in \
        result.stderr
    assert "vf.Taskset subclass" in result.stderr


def test_load_failure_is_its_message_and_traceback_only_under_debug(cli, env_key, tmp_path):
    target = f"verifiers:{ENVS / 'broken_env.py'}"
    result = cli("serve", target, "--port", str(free_port()))
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "failed: RuntimeError: the rows table 'qa_rows' is missing" in result.stderr
    assert str(ENVS / "broken_env.py") in result.stderr and "SYNTH_DEBUG=1" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout

    debug = run_serve(target, cwd=tmp_path, SYNTH_DEBUG="1")
    assert debug.returncode != 0
    assert "Traceback (most recent call last)" in debug.stderr
    assert 'broken_env.py", line' in debug.stderr and "raise RuntimeError" in debug.stderr


def test_hub_dataset_offline_names_the_dataset_and_the_fix(tmp_path):
    result = run_serve(f"verifiers:{ENVS / 'hub_env.py'}", cwd=tmp_path, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
                       HF_HOME=str(tmp_path / "hf-cache"))
    assert result.returncode == ExitCode.NETWORK, result.stderr
    assert "needs dataset 'some-org/some-dataset' from the network, which is not reachable here" in result.stderr
    assert "HF_DATASETS_OFFLINE=1 and HF_HUB_OFFLINE=1 must be unset to download" in result.stderr
    assert "copy the cache here" in result.stderr
    assert "Traceback" not in result.stderr


def test_raising_reward_fails_that_rollout_only(tmp_path):
    with scripted_model(lambda body: completion("It is 4. Or 8.")) as (model_url, _), \
            served(QA_ENV, tmp_path, "--env-args", '{"fail_reward_on": "4"}') as (base, _):
        failed = httpx.post(f"{base}/rollout", json=rollout_body(f"{model_url}?cid=c-1", seed=0, mode="rl"),
                            headers=headers(), timeout=ROLLOUT_TIMEOUT_S)
        after = httpx.post(f"{base}/rollout", json=rollout_body(f"{model_url}?cid=c-2", seed=1, mode="rl"),
                           headers=headers(), timeout=ROLLOUT_TIMEOUT_S)
    assert failed.status_code >= 500, failed.text
    error = failed.json()["detail"]["error"]
    assert error["code"] == "verifiers_reward_failed"
    assert "A reward function of the environment raised" in error["message"]
    assert "the grader broke on answer 4" in error["message"]
    assert after.status_code == 200, after.text
    assert after.json()["metrics"]["details"]["reward_components"] == {"correct": 1.0, "brief": 1.0}


@pytest.mark.parametrize(("raw", "expected"), [
    ("{bad", "--env-args is not valid JSON: Expecting property name enclosed in double quotes (line 1, column 2)"),
    ("[1, 2]", "--env-args must be a JSON object, not list."),
    ('{"limit": "many"}', "do not fit its config: limit: Input should be a valid integer"),
    ('{"eval": {"split": 3}}', "do not fit its config: eval.split: Input should be a valid string (found 3)"),
])
def test_bad_env_args_name_the_problem(cli, env_key, raw, expected):
    result = cli("serve", QA_ENV, "--port", str(free_port()), "--env-args", raw)
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert expected in result.stderr
    assert "Hint:" in result.stderr


@pytest.mark.parametrize("command", [["serve", "math"], ["deploy", "math", "--dry-run"],
                                     ["modal-serve", "math"], ["task-app", "info", "math"]])
def test_env_args_refused_for_other_apps(cli, env_key, command):
    result = cli(*command, "--env-args", "{}")
    assert result.exit_code == ExitCode.USAGE
    assert "--env-args only applies to verifiers:<target> apps; 'math' is not one." in result.stderr


def test_env_args_of_deploy_uvicorn_are_checked(cli, env_key):
    result = cli("deploy", QA_ENV, "--runtime", "uvicorn", "--port", str(free_port()), "--env-args", '"x"')
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "--env-args must be a JSON object, not str." in result.stderr
