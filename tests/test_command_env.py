"""`jobs`, `files` and `models` load `./.env` (or `--env-file`) as `train` does: the backend URL and key in it are
used against a real embedded backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend_support import BackendProcess


@pytest.fixture
def backend(shared_backend: BackendProcess) -> BackendProcess:
    """The worker's shared backend: these tests only list (and assert only that a list comes back)."""
    return shared_backend


@pytest.fixture
def env_names(monkeypatch: pytest.MonkeyPatch) -> None:
    # Empty now, filled from the .env by the command, restored (removed) after the test.
    for name in ("BACKEND_BASE_URL", "SYNTH_API_KEY"):
        monkeypatch.setenv(name, "")


def _write_env(path: Path, backend: BackendProcess) -> Path:
    path.write_text(f"BACKEND_BASE_URL={backend.url}\nSYNTH_API_KEY={backend.key}\n")
    return path


def test_nearest_dotenv_is_loaded_by_jobs_files_and_models(cli, backend, env_names, isolated_home: Path) -> None:
    _write_env(isolated_home / ".env", backend)
    nested = isolated_home / "a" / "b"
    nested.mkdir(parents=True)
    import os

    os.chdir(nested)  # found walking up
    jobs = cli("--json", "jobs", "list")
    assert jobs.exit_code == 0, jobs.stdout + jobs.stderr
    assert isinstance(jobs.json().get("jobs", jobs.json().get("data")), list)
    files = cli("--json", "files", "list")
    assert files.exit_code == 0, files.stdout + files.stderr
    models = cli("--json", "models", "list")
    assert models.exit_code == 0
    assert models.json()["backend"] == f"{backend.url}/api"


def test_env_file_flag_is_loaded_and_must_exist(cli, backend, env_names, isolated_home: Path) -> None:
    env_file = _write_env(isolated_home / "remote.env", backend)
    without = cli("--json", "jobs", "list")  # no .env here, and no backend on the default port
    assert without.exit_code != 0
    ok = cli("--json", "jobs", "list", "--env-file", str(env_file))
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    missing = cli("--json", "files", "list", "--env-file", str(isolated_home / "nope.env"))
    assert missing.exit_code == 8
    assert "Env file not found" in missing.json()["error"]["message"]
