"""synth-ai 0.2.17's own CLI checks our crafter app (`task-app validate --url`: `/`, `/health`, `/info`,
`/task_info` with seeds, `/rollout`), when the reference virtualenv exists (built by bench/reference_env.py).
One reference invocation only: its CLI takes over ten seconds to start."""

from __future__ import annotations

import subprocess

import pytest
from conftest import free_port
from reference_support import REF_CLI
from taskapp_support import ENV_KEY, stop, subprocess_env, synth_ai_command, wait_for_health

pytestmark = pytest.mark.reference_venv
pytest.importorskip("crafter")


def test_reference_cli_validates_our_crafter_app(tmp_path):
    port = free_port()
    env = subprocess_env(ENVIRONMENT_API_KEY=ENV_KEY, HOME=str(tmp_path))
    process = subprocess.Popen([*synth_ai_command(), "serve", "crafter", "--port", str(port)], env=env, cwd=tmp_path,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base, process=process, timeout=60)
        validate = subprocess.run([str(REF_CLI), "task-app", "validate", "grpo-crafter-task-app", "--url", base],
                                  env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    finally:
        stop(process)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert "All validations passed" in validate.stdout
