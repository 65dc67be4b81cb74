"""`train --dry-run` prints the steps the real submit runs: the same names, in the same order, and the same
state-changing requests. Both run here against a real embedded backend (a `synth-ai backend serve` subprocess)
and, for RL, a real task app (`synth-ai serve math-single-step`); the client's requests are recorded at the
HTTP transport, which forwards every one of them to the real servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from backend_support import TINY_TEXT, BackendProcess, serve_backend
from conftest import REPO_ROOT, run_cli

SFT_CONFIG = REPO_ROOT / "examples" / "configs" / "sft_tiny_local.toml"
DATASET = REPO_ROOT / "examples" / "datasets" / "sft_math_small.jsonl"
RL_CONFIG = REPO_ROOT / "examples" / "configs" / "rl_text_qwen3_4b.toml"
ENV_KEY = "sk_env_train_steps_0123456789abcdef"


class Recorder(httpx.BaseTransport):
    """Forwards each request to the real server and keeps `(method, url)`."""

    def __init__(self) -> None:
        self.real = httpx.HTTPTransport()
        self.sent: list[tuple[str, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, str(request.url)))
        return self.real.handle_request(request)

    def changes(self) -> list[tuple[str, str]]:
        """The requests that change state (every one but the reads)."""
        return [(method, url) for method, url in self.sent if method != "GET"]


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    yield from serve_backend(tmp_path_factory, "steps-backend", tiny=(TINY_TEXT,), env={"ENVIRONMENT_API_KEY": ENV_KEY})


@pytest.fixture(scope="module")
def math_app():
    from taskapp_support import served_app

    with served_app("math-single-step", ENV_KEY, cwd=REPO_ROOT) as url:
        yield url


@pytest.fixture
def recorder(backend: BackendProcess, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    from synth_ai.client import transport

    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    recording = Recorder()
    monkeypatch.setattr(transport, "HTTP_TRANSPORT_OVERRIDE", recording)
    return recording


def _job_ids(backend: BackendProcess) -> set[str]:
    with backend.client() as client:
        return {j["id"] for route in ("/learning/jobs", "/rl/jobs")
                for j in client.get(route, params={"limit": 200}).json()["data"]}


def _dry_then_real(backend: BackendProcess, recorder: Recorder, *args: str):
    """The dry run's document (nothing sent, no job made), then the real submit of the same command line."""
    from synth_ai.connect.embedded_backend import open_api
    from synth_ai.train.prepare import TrainOptions, prepare_training
    from synth_ai.train.submit import Hooks, submit

    jobs_before = _job_ids(backend)
    dry = run_cli("--json", "train", "--dry-run", *args, "--backend", backend.url)
    assert dry.exit_code == 0, dry.stdout + dry.stderr
    assert recorder.sent == [] and _job_ids(backend) == jobs_before, "a dry run sends nothing"
    doc = json.loads(dry.stdout)

    flags = dict(zip(args[::2], args[1::2], strict=True))
    options = TrainOptions(configs=[flags["--config"]], type=flags.get("--type", "auto"),
                           dataset=flags.get("--dataset"), task_url=flags.get("--task-url"), backend=backend.url)
    prepared = prepare_training(options, choose=None)
    api, _target = open_api(prepared.backend, say=lambda _m: None, autostart=False)
    try:
        submitted = submit(prepared, api, idempotency=None, examples=None, hooks=Hooks())
    finally:
        api.close()
    return doc, submitted


def _filled(requests: list[dict[str, Any]], values: dict[str, str]) -> list[tuple[str, str]]:
    """The dry run's state-changing backend requests, its placeholders replaced by what the run learnt."""
    out = []
    for request in requests:
        url = request["url"]
        for placeholder, value in values.items():
            url = url.replace(placeholder, value)
        if request["method"] != "GET":
            out.append((request["method"], url))
    return out


def test_sft_dry_run_lists_what_the_real_submit_runs(backend: BackendProcess, recorder: Recorder,
                                                     tmp_path: Path) -> None:
    from synth_ai.train import plan

    validation_set = tmp_path / "validation.jsonl"  # other bytes than the training set, so a file of its own
    validation_set.write_text("".join(DATASET.read_text().splitlines(keepends=True)[:4]))
    config = tmp_path / "sft_with_validation.toml"
    config.write_text(SFT_CONFIG.read_text() + f'\n[data]\nvalidation_path = "{validation_set}"\n')
    doc, submitted = _dry_then_real(backend, recorder, "--config", str(config), "--dataset", str(DATASET))
    names = [r["name"] for r in doc["requests"]]
    assert names == [plan.UPLOAD_TRAINING, plan.UPLOAD_VALIDATION, plan.WAIT_READY, plan.CREATE_JOB, plan.START_JOB]
    assert submitted.steps == names
    training, validation = (f["id"] for f in submitted.files)
    expected = _filled(doc["requests"], {plan.FILE_ID: training, plan.VALIDATION_FILE_ID: validation,
                                         plan.JOB_ID: submitted.job_id})
    assert recorder.changes() == expected
    assert expected[-1] == ("POST", f"{backend.url}/api/learning/jobs/{submitted.job_id}/start")
    run_cli("jobs", "cancel", submitted.job_id, "--backend", backend.url)  # nothing here needs it to train


def test_rl_dry_run_lists_what_the_real_submit_runs(backend: BackendProcess, recorder: Recorder, math_app: str,
                                                    tmp_path: Path, require_vllm: None) -> None:
    """The docs' RL config has a [vllm] table, which the backend refuses where vllm is not installed."""
    from synth_ai.train import plan

    # a model this CPU backend accepts at create (it refuses a 4B job); the job is cancelled below
    config = tmp_path / "rl_small.toml"
    config.write_text(RL_CONFIG.read_text().replace('base = "Qwen/Qwen3-4B"', 'base = "Qwen/Qwen3-0.6B"'))
    doc, submitted = _dry_then_real(backend, recorder, "--type", "rl", "--config", str(config),
                                    "--task-url", math_app)
    names = [r["name"] for r in doc["requests"]]
    assert names == [plan.CHECK_HEALTH, plan.CHECK_TASK_INFO, plan.SHARE_ENV_KEY, plan.VERIFY_TASK_APP,
                     plan.CREATE_JOB]
    assert submitted.steps == names
    expected = _filled(doc["requests"], {})
    assert recorder.changes() == expected
    assert [path for _m, path in expected] == [f"{backend.url}/api/v1/env-keys",
                                               f"{backend.url}/api/rl/verify_task_app", f"{backend.url}/api/rl/jobs"]
    assert submitted.job_id.startswith("rljob_")
    run_cli("jobs", "cancel", submitted.job_id, "--kind", "rl", "--backend", backend.url)  # 409 if it already failed
