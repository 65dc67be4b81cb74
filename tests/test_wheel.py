"""The package as a user installs it: the wheel built from this tree, installed with its declared dependencies into
a fresh virtual environment that cannot see the checkout, and run from an empty folder — `task-app list`, `serve`
of a bundled app answering over HTTP, `eval` of the tiny model against a bundled app, and `demo --fast`; and
README's `uvx --from <wheel>`.

The fresh venv gets its dependencies from the wheel's own metadata (`pip install '<wheel>[train]'`), resolved by
pip from the machine's package sources, torch pinned to the version this checkout's venv runs (the CPU build, as
`scripts/bootstrap.sh` pins it). Only the tiny model's weights are shared with the rest of the suite (data, not
code: linked into the data dir, as `tests/test_demo.py` does). docs/decisions.md ("The installed wheel") says why
and what it costs.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from backend_support import TINY_TEXT, build_tiny_models, link_tiny
from taskapp_support import ENV_KEY, headers, stop, wait_for_health

from conftest import _ISOLATED_VARS, REPO_ROOT, free_port

# The first test also pays for the module's fixture: building the wheel and installing it with torch (about a
# minute on an idle 2-core machine, several when its CPUs are shared); each step has its own subprocess timeout.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

BUNDLED_IDS = {"math-single-step", "color-quiz", "grpo-crafter-task-app"}
# What the build reads besides src/: the metadata, the readme it embeds, and any licence file.
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "LICENSE.md", "LICENSE.txt")
# Variables that would point the fresh venv back at the checkout or at the suite's own settings.
LEAKY_VARS = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "SYNTH_BUNDLED_TASK_APPS_DIR", *_ISOLATED_VARS)


@dataclass(frozen=True)
class Installed:
    venv: Path
    data_dir: Path  # the SYNTH_AI_HOME every command here shares (the tiny model linked in)
    backend_port: int

    @property
    def synth_ai(self) -> str:
        return str(self.venv / "bin" / "synth-ai")

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in LEAKY_VARS}
        env.update(PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", SYNTH_AI_HOME=str(self.data_dir),
                   SYNTH_AI_BACKEND_PORT=str(self.backend_port), PYTHONUNBUFFERED="1", **extra)
        return env

    def run(self, *args: str, cwd: Path, timeout: float = 300, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.synth_ai, *args], cwd=cwd, env=self.env(**extra), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _build_wheel(out: Path) -> Path:
    """`pip wheel` of a copy of the tree (a build in the checkout itself would leave `build/` behind, whose stale
    files a later build can pick up)."""
    tree = out / "source"
    tree.mkdir()
    for name in BUILD_INPUTS:
        if (REPO_ROOT / name).is_file():
            shutil.copy2(REPO_ROOT / name, tree / name)
    shutil.copytree(REPO_ROOT / "src", tree / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    dist = out / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(tree), "-w", str(dist)],
                   check=True, capture_output=True, text=True, timeout=600)
    (wheel,) = dist.glob("synth_ai-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel-build"))


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    torch_pin = f"torch=={importlib.metadata.version('torch')}"
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", f"{wheel}[train]",
                              torch_pin], capture_output=True, text=True, timeout=900,
                             env={k: v for k, v in os.environ.items() if k not in LEAKY_VARS})
    assert install.returncode == 0, install.stderr[-4000:]
    data_dir = tmp_path_factory.mktemp("wheel-data")
    link_tiny(data_dir, build_tiny_models(tmp_path_factory.getbasetemp() / "ml-core-data", (TINY_TEXT,)))
    found = Installed(venv, data_dir, free_port())
    try:
        yield found
    finally:  # eval and demo may leave the embedded backend running (eval starts it, demo reuses it)
        subprocess.run([found.synth_ai, "backend", "stop"], env=found.env(), cwd=data_dir, capture_output=True,
                       timeout=120)


def test_the_installed_package_is_the_wheel_not_the_checkout(installed: Installed, isolated_home: Path):
    code = ("import synth_ai, synth_ai.bundled_apps as b; from synth_ai.env.extras import pip_install; "
            "print(synth_ai.__file__); print(pip_install('modal')); "
            "print(sorted(p.name for p in b.APPS_DIR.iterdir() if (p / 'task_app.py').is_file()))")
    shown = subprocess.run([str(installed.venv / "bin" / "python"), "-c", code], cwd=isolated_home,
                           env=installed.env(), capture_output=True, text=True, check=True)
    module_file, hint, apps = shown.stdout.splitlines()
    assert Path(module_file).is_relative_to(installed.venv) and not Path(module_file).is_relative_to(REPO_ROOT)
    assert apps == "['colors', 'crafter', 'math']"
    # Its install hints name the wheel it was installed from (pip's direct_url.json), not the index's namesake.
    assert hint.startswith("pip install '/") and hint.endswith(".whl[modal]'"), hint


def test_task_app_list_from_an_empty_folder_shows_the_bundled_apps(installed: Installed, isolated_home: Path):
    assert not any(isolated_home.iterdir())
    listed = installed.run("--json", "task-app", "list", cwd=isolated_home)
    assert listed.returncode == 0, listed.stderr
    apps = {app["id"]: app for app in json.loads(listed.stdout)["task_apps"]}
    assert set(apps) == BUNDLED_IDS
    assert all(Path(app["path"]).is_relative_to(installed.venv) for app in apps.values())
    assert apps["math-single-step"]["aliases"] == ["math", "math-single"]


def test_serve_runs_a_bundled_app_with_its_data(installed: Installed, isolated_home: Path):
    port = free_port()
    process = subprocess.Popen([installed.synth_ai, "serve", "math-single-step", "--port", str(port)],
                               cwd=isolated_home, env=installed.env(ENVIRONMENT_API_KEY=ENV_KEY),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, ENV_KEY, process=process, timeout=180)
        info = httpx.get(f"{url}/task_info", params={"seed": 3}, headers=headers(), timeout=30)
        assert info.status_code == 200, info.text
        # The problem comes from the data file shipped inside the wheel (math/data/train.jsonl).
        train = (installed.venv / "lib").glob("python3*/site-packages/synth_ai/bundled_apps/math/data/train.jsonl")
        problems = [json.loads(line)["problem"] for line in next(train).read_text().splitlines()]
        assert json.dumps(problems[3])[1:-1] in json.dumps(info.json())
    finally:
        stop(process)


def test_eval_of_the_tiny_model_against_a_bundled_app(installed: Installed, isolated_home: Path):
    evaluated = installed.run("--json", "eval", "math-single-step", "--model", TINY_TEXT, "--seeds", "0-1",
                              "--split", "test", "--trace-db", "traces.db", cwd=isolated_home, timeout=540)
    assert evaluated.returncode == 0, evaluated.stderr[-4000:]
    doc = json.loads(evaluated.stdout)
    assert doc["inference"] == "embedded backend"
    assert [r["status"] for r in doc["results"]] == ["ok", "ok"]
    assert all(isinstance(r["official_score"], float) for r in doc["results"])
    assert (isolated_home / "traces.db").is_file()


def test_uvx_runs_the_wheel_from_an_empty_folder(wheel: Path, isolated_home: Path):
    """README's `uvx --from <wheel> synth-ai ...`: uv builds its own environment from the wheel's base dependencies
    (the user's uv cache, this interpreter), and the bundled apps and hints come with it."""
    uvx = shutil.which("uvx", path=str(Path(sys.executable).parent)) or shutil.which("uvx")
    assert uvx, "uv is a dev dependency"
    env = {k: v for k, v in os.environ.items() if k not in LEAKY_VARS}
    env.update(UV_CACHE_DIR=os.environ.get("UV_CACHE_DIR") or str(Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "uv"),
               UV_PYTHON_DOWNLOADS="never", UV_PYTHON=sys.executable, SYNTH_AI_HOME=str(isolated_home / "data"))
    listed = subprocess.run([uvx, "--from", str(wheel), "synth-ai", "--json", "task-app", "list"], cwd=isolated_home,
                            env=env, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert listed.returncode == 0, listed.stderr[-4000:]
    assert {app["id"] for app in json.loads(listed.stdout)["task_apps"]} == BUNDLED_IDS


def test_the_fast_demo_runs_the_whole_loop(installed: Installed, isolated_home: Path):
    run_dir = isolated_home / "run"
    demo = installed.run("--json", "demo", "--fast", "--run-dir", str(run_dir), cwd=isolated_home, timeout=560)
    assert demo.returncode == 0, demo.stderr[-4000:]
    doc = json.loads(demo.stdout)
    assert [m["label"] for m in doc["models"]] == ["base", "SFT", "SFT + RL"]
    assert all(m["score"] is not None and m["errors"] == 0 for m in doc["models"])
    assert all(step["exit_code"] == 0 for step in doc["steps"])
    assert (run_dir / "report.md").is_file() and (run_dir / "sft_data.jsonl").read_text().strip()
