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
    # A test's backend keeps its warm worker (the product's default): a job then starts in about a second instead of
    # paying the 18-20 s cold start. Tests of the cold path set SYNTH_AI_BACKEND_WARM_WORKER=0 themselves.
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


@pytest.fixture(scope="session", autouse=True)
def _built_models_shared_by_workers(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Under pytest-xdist, the session store's built models (tiny, hd64, mid) and its build locks are one folder for
    all workers: each model is built once per run instead of once per worker (about 40 s of CPU each time). The
    fine-tunes the tests register stay in each worker's own store."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    models = tmp_path_factory.getbasetemp() / "ml-core-data" / "models"
    shared = tmp_path_factory.getbasetemp().parent / "built-models-of-all-workers"
    models.mkdir(parents=True, exist_ok=True)
    for name in ("tiny", "built", ".locks"):
        (shared / name).mkdir(parents=True, exist_ok=True)
        if not (models / name).exists():
            (models / name).symlink_to(shared / name, target_is_directory=True)


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
def shared_backend(tmp_path_factory: pytest.TempPathFactory):
    """One backend per pytest process (per xdist worker), started on first use and stopped when the session ends,
    with the tiny Qwen3 linked, the warm worker on and `taskapp_support.ENV_KEY` as its task apps' key: for modules
    whose tests only read, or create what no other test's assertions can see (a job under its own idempotency key,
    a model under its own name, an error answer). A module that asserts on listings, counts or event cursors,
    stores env keys, needs its own env, data dir or models, or stops the backend keeps its own `serve_backend`."""
    from backend_support import TINY_TEXT, serve_backend
    from taskapp_support import ENV_KEY

    # started from whichever test needs it first: none of that test's environment may reach the server
    env: dict[str, str | None] = {name: None for name in _ISOLATED_VARS}
    env["ENVIRONMENT_API_KEY"] = ENV_KEY
    user = tmp_path_factory.mktemp("shared-backend-user")
    env["HOME"] = str(user)
    yield from serve_backend(tmp_path_factory, "shared-backend", tiny=(TINY_TEXT,), env=env, cwd=user)


@pytest.fixture(scope="session")
def require_vllm() -> None:
    """For tests that need vLLM: skipped where it is not installed, unless SYNTH_REQUIRE_VLLM=1 (scripts/test.sh
    and CI, after `./scripts/bootstrap.sh --vllm`) makes that a failure (`vllm_support.require_vllm`)."""
    from vllm_support import require_vllm as required

    required()


@pytest.fixture(scope="module")
def optim_extra():
    """bitsandbytes and torchao importable in this process: scripts/project_venv.py installs the optim extra into
    the venv's `optim-extra` folder (its OPTIM_OVERLAY), outside site-packages, so that other processes do not load
    them; a venv with the extra installed as usual serves as is."""
    import importlib.util

    overlay = str(Path(sys.prefix) / "optim-extra")
    added = Path(overlay).is_dir() and overlay not in sys.path
    if added:
        sys.path.append(overlay)
        importlib.invalidate_caches()
    missing = [name for name in ("bitsandbytes", "torchao") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not importable: run scripts/bootstrap.sh, or pip install -e '.[optim]'")
    yield
    if added:
        sys.path.remove(overlay)


@pytest.fixture
def cli():
    return run_cli


REPO_ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Hand the longest modules to the workers first (tests/module_order.py)."""
    from module_order import reorder_items

    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    reorder_items(items, workers)


@pytest.fixture(autouse=True)
def _reference_venv_ready(request: pytest.FixtureRequest) -> None:
    """Tests marked `reference_venv` wait for test.sh's background build of it, or skip without it."""
    if request.node.get_closest_marker("reference_venv") is not None:
        from reference_support import require_reference

        require_reference()
