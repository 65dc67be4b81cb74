"""The README's test command: how many workers it picks, and that its Ctrl-C tests pass with SIGINT ignored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

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
        assert command == "pytest -n 2 --dist loadfile -q"
    else:
        assert command == "pytest -q"


def test_explicit_worker_count_is_honoured():
    env = {**os.environ, "SYNTH_TEST_PRINT_COMMAND": "1", "SYNTH_TEST_WORKERS": "0"}
    assert _planned_pytest_command(env) == "pytest -q"


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
