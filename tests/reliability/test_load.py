"""Load: many concurrent clients against the real embedded backend (list, upload, create, events, inference) and
many concurrent rollouts against each bundled task app. No error beyond the documented back-pressure (429 with
Retry-After, 503), no "database is locked" ever reaching a client, no duplicate from a retried create, and the
servers healthy afterwards. The default run is small; `pytest -m soak` runs the full size (200 clients, 100
rollouts per app) and writes its figures to `$SYNTH_RELIABILITY_OUT`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest
from reliability.load_backend import run_backend_load
from reliability.load_stats import LoadLog
from reliability.load_taskapps import APPS, run_taskapp_load, scripted_policy
from taskapp_support import scripted_model

from backend_support import TINY_TEXT, BackendProcess, serve_backend

FAST_CLIENTS, SOAK_CLIENTS = 30, 200
FAST_ROLLOUTS, SOAK_ROLLOUTS = 20, 100
FAST_CRAFTER_ROLLOUTS = 6  # a crafter rollout builds a world and renders frames: seconds of CPU each


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    yield from serve_backend(tmp_path_factory, "load-backend", env={"SYNTH_AI_BACKEND_WARM_WORKER": "0"})


@pytest.fixture(scope="module")
def inference_backend(tmp_path_factory: pytest.TempPathFactory):
    """A backend that can answer inference with the tiny local Qwen3 (built once per session)."""
    yield from serve_backend(tmp_path_factory, "load-inference-backend", tiny=(TINY_TEXT,),
                             env={"SYNTH_AI_BACKEND_WARM_WORKER": "0"})


def _write(name: str, figures: dict, tmp_path: Path) -> None:
    out = Path(os.environ.get("SYNTH_RELIABILITY_OUT", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures))


def warm_inference(backend: BackendProcess) -> float:
    """One request first, timed: the first loads torch and the model in the backend, and is reported apart."""
    started = time.monotonic()
    with backend.client(timeout=300) as client:
        client.post("/inference/v1/chat/completions", json={
            "model": TINY_TEXT, "max_tokens": 2, "messages": [{"role": "user", "content": "warm up"}]},
        ).raise_for_status()
    return round(time.monotonic() - started, 1)


def backend_load(backend: BackendProcess, workdir: Path, clients: int, rounds: int, *, inference: bool) -> dict:
    log, made = run_backend_load(api_base=f"{backend.url}/api", key=backend.key, workdir=workdir, clients=clients,
                                 rounds=rounds, inference=inference)
    figures = {"clients": clients, "rounds": rounds, "inference": inference, **made, **log.figures()}
    with backend.client() as client:
        figures["healthy_after"] = httpx.get(f"{backend.url}/health", timeout=10).status_code == 200 and \
            client.get("/learning/jobs", params={"limit": 1}).status_code == 200
        names = [f["filename"] for f in client.get("/files", params={"limit": 1000}).json()["data"]]
    figures["files_on_backend"] = sum(1 for n in names if n.startswith("load-") and n.endswith(".jsonl"))
    figures["backend_log_locked"] = backend.log().lower().count("database is locked")
    return figures


def _assert_backend(figures: dict) -> None:
    assert figures["clients_finished"] == figures["clients"], figures
    assert figures["client_failure_count"] == 0, figures["client_failures"]
    assert figures["unexpected_count"] == 0, figures["unexpected"]
    assert figures["database_locked"] == 0, figures
    assert figures["healthy_after"], figures
    expected = figures["clients"] * figures["rounds"]
    assert figures["files"] == figures["jobs"] == figures["files_on_backend"] == expected, figures


def test_backend_serves_concurrent_clients_without_errors(backend, tmp_path):
    # Without inference here: its first request loads torch and the model in the backend (~20 s on CI).
    figures = backend_load(backend, tmp_path, FAST_CLIENTS, rounds=1, inference=False)
    print(json.dumps(figures))
    _assert_backend(figures)


def taskapp_load(count: int, crafter_count: int | None = None) -> dict:
    log = LoadLog()
    with scripted_model(scripted_policy) as (model_url, _model):
        apps = [run_taskapp_load(app, model_url, crafter_count if "crafter" in app and crafter_count else count, log)
                for app in APPS]
    return {"apps": apps, **log.figures()}


def _assert_taskapps(figures: dict) -> None:
    assert figures["client_failure_count"] == 0, figures["client_failures"]
    assert figures["unexpected_count"] == 0, figures["unexpected"]
    assert all(a["healthy_after"] for a in figures["apps"]), figures["apps"]


def test_task_apps_serve_concurrent_rollouts(tmp_path):
    figures = taskapp_load(FAST_ROLLOUTS, FAST_CRAFTER_ROLLOUTS)
    print(json.dumps(figures))
    _assert_taskapps(figures)


@pytest.mark.soak
def test_soak_backend_under_200_clients(inference_backend, tmp_path):
    cold_start_s = warm_inference(inference_backend)
    figures = backend_load(inference_backend, tmp_path,
                           int(os.environ.get("SYNTH_RELIABILITY_CLIENTS", SOAK_CLIENTS)), rounds=1, inference=True)
    figures["inference_cold_start_s"] = cold_start_s
    _write("load_backend.json", figures, tmp_path)
    _assert_backend(figures)


@pytest.mark.soak
def test_soak_task_apps_under_100_rollouts_each(tmp_path):
    figures = taskapp_load(int(os.environ.get("SYNTH_RELIABILITY_ROLLOUTS", SOAK_ROLLOUTS)))
    _write("load_taskapps.json", figures, tmp_path)
    _assert_taskapps(figures)
