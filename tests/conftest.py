"""Shared fixtures: an isolated home and data dir for every test, free ports, and a CLI runner."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

# Environment variables that would leak a developer's real setup into tests.
_ISOLATED_VARS = (
    "SYNTH_API_KEY", "ENVIRONMENT_API_KEY", "DEV_ENVIRONMENT_API_KEY", "dev_environment_api_key",
    "ENVIRONMENT_API_KEY_ALIASES", "TASK_APP_URL", "TASK_APP_BASE_URL", "BACKEND_BASE_URL", "SYNTH_BASE_URL",
    "BACKEND_OVERRIDE", "SYNTH_BACKEND_URL_OVERRIDE", "LOCAL_BACKEND_URL", "DEV_BACKEND_URL", "PROD_BACKEND_URL",
    "SDK_EXPERIMENTAL", "SDK_EXPERIMENTAL_MODELS", "OPENAI_API_KEY", "GROQ_API_KEY", "GEMINI_API_KEY",
    "SYNTH_DEBUG", "SYNTH_TASK_APP_SEARCH_PATH", "TASKAPP_TRACING_ENABLED", "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET",
    "SYNTH_SETUP_ORIGIN", "MATH_DATASET_LOCAL_DIR", "SYNTH_AI_BACKEND_PORT",
)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own HOME, SYNTH_AI_HOME and working directory."""
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SYNTH_AI_HOME", str(home / ".synth-ai"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # No warm worker in a test's backend unless the test asks for one: it would import torch in the background.
    monkeypatch.setenv("SYNTH_AI_BACKEND_WARM_WORKER", "0")
    for name in _ISOLATED_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def ctrl_c_delivered():
    """Ctrl-C reaches a test that sends SIGINT (to itself or to a child) even where the suite was started with SIGINT
    ignored: a background job of a non-interactive shell, nohup, some CI runners. Python installs no
    KeyboardInterrupt handler then, and children inherit the ignored disposition, so the test would hang until the
    pytest timeout. For the test's duration SIGINT gets Python's handler, which children reset to the default."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class CLIResult:
    exit_code: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


def run_cli(*args: str) -> CLIResult:
    """Run the real CLI entry point in-process, capturing stdout and stderr separately."""
    from synth_ai.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return CLIResult(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Both tiny models (Qwen3, Qwen3-VL), built once per session in the store the ML test modules share."""
    from backend_support import build_tiny_models

    return build_tiny_models(tmp_path_factory.getbasetemp() / "ml-core-data")


@pytest.fixture(scope="session")
def tiny_text_models(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The tiny Qwen3 alone (the same shared store)."""
    from backend_support import TINY_TEXT, build_tiny_models

    return build_tiny_models(tmp_path_factory.getbasetemp() / "ml-core-data", (TINY_TEXT,))


@pytest.fixture(scope="session")
def require_vllm() -> None:
    """For tests that need vLLM: skipped where it is not installed, unless SYNTH_REQUIRE_VLLM=1 (CI, after
    `./scripts/bootstrap.sh --vllm`) makes that a failure (`vllm_support.require_vllm`)."""
    from vllm_support import require_vllm as required

    required()


@pytest.fixture
def cli():
    return run_cli


REPO_ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
