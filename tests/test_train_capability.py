"""`train` refuses, before uploading or creating anything, when the backend reports that it cannot train (no
training extra where it runs), with the commands that add the extra; a backend it started for this is stopped.

The main case is the one users hit: `uvx --from . synth-ai train ...` from a checkout. uvx builds an environment
with the base dependencies only (no torch), and the embedded backend it starts runs there. The other cases run a
real backend whose interpreter cannot see torch (a `sitecustomize` that hides it: an environment without the
extra, without a second virtualenv).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from backend_support import BackendProcess
from conftest import REPO_ROOT, free_port, run_cli

CONFIG = "examples/configs/sft_tiny_local.toml"


def _counts(data_dir: Path) -> tuple[int, int]:
    with sqlite3.connect(data_dir / "backend" / "backend.sqlite3") as conn:
        return (conn.execute("SELECT COUNT(*) FROM files").fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])


def _without_torch(tmp_path: Path) -> dict[str, str]:
    """Environment for a backend process in which torch, transformers and peft cannot be found."""
    site = tmp_path / "no-train-extra"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\nfor name in ('torch', 'transformers', 'peft'):\n    sys.modules[name] = None\n")
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def test_health_reports_whether_the_backend_can_train(tmp_path: Path) -> None:
    able = BackendProcess(tmp_path / "able").start()
    unable = BackendProcess(tmp_path / "unable", env=_without_torch(tmp_path)).start()
    try:
        assert httpx.get(f"{able.url}/health").json()["training"] == {"available": True, "missing": [],
                                                                       "extra": "train"}
        doc = httpx.get(f"{unable.url}/health").json()["training"]
        assert doc == {"available": False, "missing": ["torch", "transformers", "peft"], "extra": "train"}
        with unable.client() as client:
            assert client.get("/health").json()["training"]["available"] is False
    finally:
        able.stop()
        unable.stop()


def test_running_backend_without_the_extra_is_refused_before_upload(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    backend = BackendProcess(tmp_path / "data", env=_without_torch(tmp_path)).start()
    try:
        monkeypatch.setenv("SYNTH_API_KEY", backend.key)
        monkeypatch.chdir(REPO_ROOT)
        result = run_cli("train", "--config", CONFIG, "--backend", backend.url)
        assert result.exit_code == 10, result.stdout + result.stderr
        assert "cannot train: torch, transformers and peft are not installed" in result.stderr
        assert "Nothing was uploaded and no job was created." in result.stderr
        assert f"pip: pip install '.[train]'" in result.stderr
        assert (f"uv:  uvx --from '.[train]' synth-ai train --config {CONFIG} --backend {backend.url}"
                in result.stderr)
        assert "Uploading" not in result.stdout and "Traceback" not in result.stderr
        assert _counts(backend.data_dir) == (0, 0)
        assert backend.proc is not None and backend.proc.poll() is None, "a backend it did not start is left alone"
        as_json = run_cli("--json", "train", "--config", CONFIG, "--backend", backend.url)
        error = json.loads(as_json.stdout)["error"]
        assert error["code"] == "training_unavailable" and error["exit_code"] == 10
        assert error["details"]["training"]["missing"] == ["torch", "transformers", "peft"]
    finally:
        backend.stop()


def test_embedded_backend_already_running_without_the_extra_says_to_restart_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from synth_ai.env.paths import data_dir

    port = free_port()
    monkeypatch.setenv("SYNTH_AI_BACKEND_PORT", str(port))
    backend = BackendProcess(data_dir(), port=port, env=_without_torch(tmp_path)).start()
    try:
        monkeypatch.chdir(REPO_ROOT)
        result = run_cli("train", "--config", CONFIG)
        assert result.exit_code == 10, result.stdout + result.stderr
        assert "Stop the running backend (`synth-ai backend stop`)" in result.stderr
        assert "Stopped the embedded backend" not in result.stdout
        assert backend.proc is not None and backend.proc.poll() is None
        assert _counts(backend.data_dir) == (0, 0)
    finally:
        backend.stop()


def _uv_environment(home: Path, port: int) -> dict[str, str]:
    """The test's isolated environment, plus the user's uv cache (so packages are downloaded once) and no
    Python downloads (uv uses this interpreter)."""
    env = dict(os.environ)
    env["UV_CACHE_DIR"] = os.environ.get("UV_CACHE_DIR") or str(Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "uv")
    env.update({"UV_PYTHON_DOWNLOADS": "never", "UV_PYTHON": sys.executable, "SYNTH_AI_HOME": str(home),
                "SYNTH_AI_BACKEND_PORT": str(port), "NO_COLOR": "1"})
    return env


def test_uvx_from_a_checkout_refuses_before_upload_and_stops_the_backend_it_started(tmp_path: Path) -> None:
    uvx = shutil.which("uvx", path=str(Path(sys.executable).parent)) or shutil.which("uvx")
    assert uvx, "uv is a dev dependency (pip install -e '.[dev]')"
    home, port = tmp_path / "synth-home", free_port()
    env = _uv_environment(home, port)
    command = [uvx, "--from", ".", "synth-ai", "train", "--config", CONFIG]  # as in the docs, from the checkout
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    output = " ".join((result.stdout + result.stderr).split())  # rich wraps long lines at the terminal width
    assert result.returncode == 10, output
    assert f"starting the embedded backend on 127.0.0.1:{port}" in output
    assert "cannot train: torch, transformers and peft are not installed" in output
    assert f"uv: uvx --from '.[train]' synth-ai train --config {CONFIG}" in output
    assert "pip: pip install '.[train]'" in output
    assert "Stopped the embedded backend this command had started." in output
    assert "Uploading" not in output and "Traceback" not in output
    assert _counts(home) == (0, 0), "nothing uploaded, no job"
    from synth_ai.backend import daemon

    assert daemon.status(home)["running"] is False, "the auto-started backend is not left running"
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_backend_started_for_a_refused_run_is_stopped_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any refusal before a job exists (here: an invalid dataset) leaves no auto-started backend behind."""
    from synth_ai.backend import daemon
    from synth_ai.env.paths import data_dir

    port = free_port()
    monkeypatch.setenv("SYNTH_AI_BACKEND_PORT", str(port))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "only one turn"}]}\n')
    monkeypatch.chdir(REPO_ROOT)
    try:
        result = run_cli("train", "--config", CONFIG, "--dataset", str(bad))
        assert result.exit_code == 3, result.stdout + result.stderr
        assert f"starting the embedded backend on 127.0.0.1:{port}" in result.stdout
        assert "Stopped the embedded backend this command had started." in result.stdout
        assert daemon.status(data_dir())["running"] is False
    finally:
        daemon.stop(data_dir())
