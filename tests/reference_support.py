"""The synth-ai 0.2.17 virtualenv the compatibility tests drive (built by bench/reference_env.py, linked at
bench/.cache/ref-venv). Tests that need it carry `@pytest.mark.reference_venv`; conftest then calls
`require_reference()` before each of them.

scripts/test.sh builds that venv in the background while the first tests run (minutes on a machine with no set-up
cache, an instant with one) and names, in SYNTH_REFERENCE_BUILD_STATUS, the file the build writes its exit status
to when it ends: a test that needs the venv waits for that file. Where the venv cannot be had, those tests skip
with the reason (as they always have on a machine without it)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
REF_VENV = REPO_ROOT / "bench" / ".cache" / "ref-venv"
REF_PYTHON = REF_VENV / "bin" / "python"
REF_CLI = REF_VENV / "bin" / "synth-ai"
BUILD_STATUS_ENV = "SYNTH_REFERENCE_BUILD_STATUS"
BUILD_WAIT_S = 1800.0  # the build's own pip timeouts end it well before this


def require_reference() -> None:
    """Wait for test.sh's background build, if one runs; skip the test when the venv is not there."""
    wait_for_build(BUILD_STATUS_ENV, REF_CLI, "the synth-ai 0.2.17 reference venv", "python bench/reference_env.py")


def wait_for_build(status_env: str, ready: Path, what: str, build_command: str) -> None:
    """Wait for the background build whose exit status test.sh writes to the file named in `status_env`; skip
    when `ready` (what the build makes) is still missing after it."""
    status = os.environ.get(status_env)
    if status:
        status_file = Path(status)
        log = Path(f"{status}.log")
        deadline = time.monotonic() + BUILD_WAIT_S
        while not status_file.exists() and time.monotonic() < deadline:
            time.sleep(1.0)
        if not status_file.exists():
            pytest.fail(f"{what}'s build did not end within {BUILD_WAIT_S:.0f} s (its log: {log})")
        code = status_file.read_text().strip()
        if code != "0" and not ready.exists():
            pytest.skip(f"{what} could not be built (exit {code}; its log: {log})")
    if not ready.exists():
        pytest.skip(f"{what} is not built ({build_command})")
