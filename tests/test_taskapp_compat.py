"""Compatibility with synth-ai 0.2.17 (when its virtualenv from `bench/reference_env.py` is present): our verifier
passes the reference's math app with a real rollout, and the reference's `task-app validate --url` (health, info,
task_info with instances, rollout route) passes our served math app."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import free_port
from reference_support import REF_CLI, REF_VENV
from taskapp_support import (
    ENV_KEY,
    completion,
    scripted_model,
    stop,
    subprocess_env,
    synth_ai_command,
    tool_call,
    wait_for_health,
)

from synth_ai.bundled_apps import APPS_DIR
from synth_ai.taskapp.verify import verify_task_app

pytestmark = [pytest.mark.slow, pytest.mark.reference_venv]


def _ref_site_packages():
    found = sorted(REF_VENV.glob("lib/python3*/site-packages"))
    return found[0]


def test_reference_math_app_passes_our_verifier(tmp_path):
    app_dir = tmp_path / "refapp"
    shutil.copytree(_ref_site_packages() / "examples" / "task_apps" / "math", app_dir,
                    ignore=shutil.ignore_patterns("__pycache__"))
    data = tmp_path / "data"
    shutil.copytree(APPS_DIR / "math" / "data", data)
    port = free_port()
    env = subprocess_env(SYNTH_TASK_APP_SEARCH_PATH=str(app_dir), MATH_DATASET_LOCAL_DIR=str(data),
                         ENVIRONMENT_API_KEY=ENV_KEY, GROQ_API_KEY="dummy", HOME=str(tmp_path))
    env.pop("SYNTH_API_KEY", None)
    process = subprocess.Popen(
        [str(REF_CLI), "serve", "math-single-step", "--host", "127.0.0.1", "--port", str(port),
         "--trace", str(tmp_path / "tr"), "--trace-db", str(tmp_path / "tr" / "db.db")],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base, timeout=120, process=process)
        with scripted_model(lambda body: completion(tool_calls=[tool_call("math_submit", {"answer": "1296"})])) \
                as (model_url, _):
            report = verify_task_app(base, ENV_KEY, min_instances=10, inference_url=model_url, model="m")
    finally:
        stop(process)
    assert report.ok, report.to_dict()
    assert "mean return 1" in report.checks[-1].message


def test_reference_cli_validates_our_math_app(tmp_path):
    port = free_port()
    env = subprocess_env(ENVIRONMENT_API_KEY=ENV_KEY, HOME=str(tmp_path))
    process = subprocess.Popen([*synth_ai_command(), "serve", "math", "--port", str(port)], env=env, cwd=tmp_path,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base, process=process)
        validate = subprocess.run([str(REF_CLI), "task-app", "validate", "math-single-step", "--url", base],
                                  env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    finally:
        stop(process)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert "All validations passed" in validate.stdout
