"""The messages users tripped on (issue 37, item 11), each through the real CLI: a bare `synth-ai`, an unknown RL job
id, a dry run while another program holds the backend's default port, an idempotent re-run of a job that already
ended, and the RL iteration line. Ports held by other programs under `serve --force` are in test_taskapp_serve.py,
the exported model's chat template in test_model_export.py."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from backend_support import BackendProcess, job_status, wait_for
from conftest import REPO_ROOT, free_port, run_cli

SFT_TINY = REPO_ROOT / "examples/configs/sft_tiny_local.toml"


@pytest.fixture
def backend(shared_backend: BackendProcess) -> BackendProcess:
    """The worker's shared backend: these tests ask for unknown jobs and follow the one job their own command made."""
    return shared_backend


def test_bare_synth_ai_prints_help_and_exits_0():
    result = run_cli()
    assert result.exit_code == 0, result.stderr
    assert "Usage: synth-ai" in result.stdout and "train" in result.stdout and not result.stderr


def test_an_unknown_rl_job_id_says_not_found_like_an_sft_one(backend: BackendProcess,
                                                              monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    for job_id in ("rljob_doesnotexist", "job_doesnotexist"):
        result = run_cli("jobs", "get", job_id, "--backend", backend.url)
        assert result.exit_code == 8, result.stderr
        assert f"Job '{job_id}' not found" in result.stderr, result.stderr
        assert "No route" not in result.stderr


@pytest.fixture
def default_port_taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Another program listening on the port the embedded backend would try first."""
    port = free_port()
    monkeypatch.setenv("SYNTH_AI_BACKEND_DEFAULT_PORT", str(port))
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))
        other.listen()
        yield port


def test_a_dry_run_never_shows_the_port_another_program_holds(default_port_taken: int,
                                                              monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(REPO_ROOT)  # the example's dataset path is relative to the repository root
    result = run_cli("--json", "train", "--dry-run", "--config", str(SFT_TINY))
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["backend"]["api_base"] == "http://127.0.0.1:<free port>/api"
    assert all(r["url"].startswith("http://127.0.0.1:<free port>/api/") for r in doc["requests"])
    assert f":{default_port_taken}" not in json.dumps(doc["requests"])
    (note,) = [n["message"] for n in doc["notes"] if "taken by another program" in n["message"]]
    assert f"Port {default_port_taken} is taken" in note and "synth-ai backend start" in note
    human = run_cli("train", "--dry-run", "--config", str(SFT_TINY))
    assert "Backend: http://127.0.0.1:<free port>/api (embedded default)" in human.stdout


def test_a_dry_run_shows_the_default_port_when_it_is_free(monkeypatch: pytest.MonkeyPatch):
    port = free_port()
    monkeypatch.setenv("SYNTH_AI_BACKEND_DEFAULT_PORT", str(port))
    monkeypatch.chdir(REPO_ROOT)
    doc = run_cli("--json", "train", "--dry-run", "--config", str(SFT_TINY)).json()
    assert doc["backend"]["api_base"] == f"http://127.0.0.1:{port}/api"
    assert not [n for n in doc["notes"] if "taken by another program" in n["message"]]


def _sft_no_poll(backend: BackendProcess, *json_flag: str):
    return run_cli(*json_flag, "train", "--config", str(SFT_TINY), "--backend", backend.url, "--no-poll")


def test_an_idempotent_rerun_names_the_existing_job_and_its_state(backend: BackendProcess,
                                                                  monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    monkeypatch.chdir(REPO_ROOT)
    first = _sft_no_poll(backend, "--json")
    assert first.exit_code == 0, first.stderr
    job_id = first.json()["job_id"]
    with backend.client() as api:
        wait_for(lambda: job_status(api, job_id) in {"succeeded", "failed"}, timeout=300, interval=0.5,
                 what=f"the job {job_id}")
        assert job_status(api, job_id) == "succeeded"
    again = _sft_no_poll(backend)
    assert again.exit_code == 0, again.stderr
    assert f"Same job as an earlier run of this command (id={job_id}" in again.stdout
    assert f"✓ Not started again: job {job_id} is the existing job, succeeded" in again.stdout
    assert "✓ Job started" not in again.stdout


def _rl_record(loss: float) -> dict[str, Any]:
    return {"iteration": 2, "reward_mean": 0.40625, "reward_std": 0.31, "loss": loss, "kl": 1.5e-05,
            "clip_fraction": 0.0625, "errors": 0}


@pytest.mark.parametrize("loss", [-2.3e-09, 0.0, 4.2e-07])
def test_the_rl_iteration_line_shows_numbers_that_move(loss: float):
    from synth_ai.backend.trainers.rl.iteration_report import step_message

    line = step_message(_rl_record(loss), 2, 8)
    assert "0.0000" not in line.replace("0.40625", "")  # never a fixed-point zero that hides the value
    assert line == (f"iteration 3/8: reward 0.4062 (std 0.31), loss {loss:.3e}, kl 1.5e-05, clip 0.062, "
                    "0 failed rollouts")
