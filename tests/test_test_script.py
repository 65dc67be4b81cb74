"""The README's test command: how many workers it picks (and that it prints the slowest tests), that its Ctrl-C tests
pass with SIGINT ignored, and the set-up cache it builds .venv from (a stale key rebuilds, a matching key reuses)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _planned_pytest_command(env: dict[str, str]) -> str:
    result = subprocess.run(["bash", str(REPO / "scripts" / "test.sh"), "-q"], env=env, capture_output=True,
                            text=True, timeout=60, check=True)
    return result.stdout.strip()


def test_worker_count_ignores_omp_num_threads():
    # OMP_NUM_THREADS=1 is what the script itself exports and what many shells carry; GNU nproc honours it.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SYNTH_TEST_PRINT_COMMAND": "1"}
    env.pop("SYNTH_TEST_WORKERS", None)
    command = _planned_pytest_command(env)
    if len(os.sched_getaffinity(0)) >= 2:
        assert command == "pytest -n 3 --dist loadfile --no-loadscope-reorder --durations=30 -q"
    else:
        assert command == "pytest --durations=30 -q"


def test_explicit_worker_count_is_honoured():
    env = {**os.environ, "SYNTH_TEST_PRINT_COMMAND": "1", "SYNTH_TEST_WORKERS": "0"}
    assert _planned_pytest_command(env) == "pytest --durations=30 -q"


def test_ctrl_c_reaches_tests_when_the_suite_runs_with_sigint_ignored():
    """A background job of a non-interactive shell starts with SIGINT ignored; a Ctrl-C test (and the child process
    it signals) must still get its KeyboardInterrupt instead of waiting out the pytest timeout."""
    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "90",
                             "tests/test_ctrl_c_delivery.py"], cwd=REPO, env=env, preexec_fn=ignore_sigint,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 passed" in result.stdout


# --- the set-up cache (scripts/setup_cache.py, scripts/project_venv.py) --------------------------------------------
# A stand-in clone: the real scripts over a project with no dependencies, so a cache entry is a real venv built by the
# real recipe in seconds (no multi-GB install); `pip` stands in for the torch pin, `json` for the stack's imports.
_FAKE_PYPROJECT = """[build-system]
requires = ["setuptools>=61", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "synth-ai"
version = "{version}"

[project.optional-dependencies]
dev = []
"""


def _fake_clone(root: Path, version: str = "0.0.1") -> Path:
    (root / "scripts").mkdir(parents=True)
    for name in ("setup_cache.py", "project_venv.py"):
        shutil.copy(REPO / "scripts" / name, root / "scripts" / name)
    (root / "src" / "synth_ai").mkdir(parents=True)
    (root / "src" / "synth_ai" / "__init__.py").write_text(f"WHERE = {str(root)!r}\n")
    (root / "pyproject.toml").write_text(_FAKE_PYPROJECT.format(version=version))
    return root


def _ensure(clone: Path, cache: Path) -> tuple[str, str]:
    """Run the clone's own project_venv.ensure in a subprocess (as bootstrap.sh does); its outcome and stderr."""
    code = ("import sys; from pathlib import Path; sys.path.insert(0, 'scripts'); import project_venv as pv\n"
            "recipe = pv.Recipe(Path('.').resolve(), 'pip', None, extras='dev', stack=('json',))\n"
            "print(pv.ensure(recipe, Path('.venv').resolve()))")
    env = {**os.environ, "SYNTH_CACHE_DIR": str(cache)}
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(name, None)
    result = subprocess.run([_BASE_PYTHON, "-c", code], cwd=clone, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()[-1], result.stderr


_BASE_PYTHON = os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def _imported_from(clone: Path) -> str:
    return subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", "import synth_ai; print(synth_ai.WHERE)"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("project-venv-*") if p.is_dir())


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One cache with one entry, built by a first clone (shared by the tests below: each uses its own clones)."""
    root = tmp_path_factory.mktemp("setup-cache")
    first = _fake_clone(root / "first")
    outcome, log = _ensure(first, root / "cache")
    assert outcome == "built", log
    assert "[1/3]" in log and "[2/3]" in log and "[3/3]" in log  # phase lines, not pip's output
    assert "Collecting" not in log and "Successfully installed" not in log
    return root / "cache", first


def test_a_matching_key_reuses_the_entry_through_hard_links(built_cache: tuple[Path, Path], tmp_path: Path):
    cache, first = built_cache
    assert _ensure(first, cache)[0] == "ready"  # nothing changed: nothing done
    second = _fake_clone(tmp_path / "second")
    outcome, log = _ensure(second, cache)
    assert outcome == "reused" and "reusing the cached venv" in log
    [entry] = _entries(cache)
    assert _imported_from(second) == str(second)  # its own src, not the first clone's
    assert _imported_from(first) == str(first)
    # linked, not copied; and the files that name the venv's place were replaced, not written through the link
    pip_module = Path("lib") / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "pip" / \
        "__init__.py"
    assert (second / ".venv" / pip_module).stat().st_ino == (entry / pip_module).stat().st_ino
    assert (second / ".venv" / "bin" / "pip").read_text().startswith(f"#!{second / '.venv' / 'bin' / 'python'}")
    assert (entry / "bin" / "pip").read_text().startswith(f"#!{entry / 'bin' / 'python'}")
    assert not list((entry / "lib").glob("*/site-packages/__editable__*"))  # no clone's src in the cache
    assert not (entry / ".synth-ai-setup.json").exists()  # the stamp is the clone's own file


def test_a_stale_key_builds_a_new_entry_from_scratch(built_cache: tuple[Path, Path], tmp_path: Path):
    cache, _first = built_cache
    before = _entries(cache)
    changed = _fake_clone(tmp_path / "changed", version="0.0.2")  # pyproject's [project] table is part of the key
    outcome, log = _ensure(changed, cache)
    assert outcome == "built" and "[1/3]" in log
    after = _entries(cache)
    assert len(after) == len(before) + 1 and set(before) < set(after)
    assert _imported_from(changed) == str(changed)
    assert _ensure(changed, cache)[0] == "ready"


def test_a_broken_entry_with_a_matching_key_is_rebuilt(built_cache: tuple[Path, Path], tmp_path: Path):
    cache, first = built_cache
    broken_clone = _fake_clone(tmp_path / "broken", version="0.0.3")
    assert _ensure(broken_clone, cache)[0] == "built"
    entry = next(p for p in _entries(cache) if json.loads((p / ".synth-ai-cache.json").read_text())
                 ["definition"]["project"]["version"] == "0.0.3")
    shutil.rmtree(next((entry / "lib").glob("*/site-packages/pip")))  # its key still matches; pip no longer imports
    another = _fake_clone(tmp_path / "another", version="0.0.3")
    outcome, log = _ensure(another, cache)
    assert outcome == "built" and "is broken: rebuilding it from scratch" in log
    assert _imported_from(another) == str(another)
    assert next((entry / "lib").glob("*/site-packages/pip")).is_dir()
