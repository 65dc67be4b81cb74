"""Helpers for the verifiers task-app tests: the test environments and `synth-ai serve` in its own process."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import free_port
from taskapp_support import (
    ENV_KEY,
    stop,
    subprocess_env,
    synth_ai_command,
    wait_for_health,
)

ENVS = Path(__file__).resolve().parent / "verifiers_envs"
QA_ENV = f"verifiers:{ENVS / 'qa_env.py'}"
CALC_ENV = f"verifiers:{ENVS / 'calc_env'}"
ROLLOUT_TIMEOUT_S = 180  # the first episode of a process syncs verifiers' chat program (uv)


@pytest.fixture(autouse=True)
def env_args_restored(monkeypatch):
    """`--env-args` given to an in-process command is exported to this process: undone after each test."""
    monkeypatch.setenv("SYNTH_VERIFIERS_ENV_ARGS", "")


@contextmanager
def served(app_id: str, cwd: Path, *args: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """`synth-ai serve <app_id> --port <free> [args]` in its own process; yields its URL once healthy."""
    port = free_port()
    process = subprocess.Popen([*synth_ai_command(), "serve", app_id, "--port", str(port), *args], cwd=cwd,
                               env=subprocess_env(ENVIRONMENT_API_KEY=ENV_KEY), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, process=process, timeout=180)  # a loaded machine imports slowly
        yield url, process
    finally:
        stop(process)
