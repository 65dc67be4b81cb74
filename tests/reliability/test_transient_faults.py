"""Transient faults between our client and the real backend: upload → create → follow flows through a loopback
proxy that answers 429 (with Retry-After) and 500/502/503, resets connections, and drops answers after the backend
committed, at a 20 % rate on every route.

The backend is a real `synth-ai backend serve` subprocess (real SQLite); the flows use our real client code. The
fast run (`FAST_FLOWS` flows) is part of the default suite; `pytest -m soak` runs `SOAK_FLOWS` and writes its
figures to `$SYNTH_RELIABILITY_OUT` (default: the test's tmp dir).
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from reliability.faults_checks import backend_records, duplicate_violations, key_violations, retry_violations
from reliability.faults_flows import run_flow
from reliability.faults_proxy import FaultProxy, FaultRule

from backend_support import TINY_TEXT, BackendProcess, serve_backend
from conftest import REPO_ROOT

CONFIG = REPO_ROOT / "examples" / "configs" / "sft_tiny_local.toml"
FAULT_RATE = 0.2
FAST_FLOWS = 120
SOAK_FLOWS = 1200
SOAK_TRAININGS = 4
WORKERS = 6  # flows in flight at once
# One flow in ten goes through `synth-ai train`'s submit code (which also starts the job, so a worker process is
# started and then cancelled: the expensive part); one in ten is a create the backend refuses.
MIX = ("train",) + ("create",) * 8 + ("reject",)

CREATE_FAULTS = ("status:429", "status:500", "status:502", "status:503", "reset", "drop", "after-commit:502")
READ_FAULTS = ("status:429", "status:500", "status:502", "status:503", "reset", "drop")
RULES = [
    FaultRule(r"POST /api/.*", CREATE_FAULTS, FAULT_RATE),
    FaultRule(r"GET /api/.*", READ_FAULTS, FAULT_RATE),
]


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    yield from serve_backend(tmp_path_factory, "faults-backend", env={"SYNTH_AI_BACKEND_WARM_WORKER": "0",
                                                                      "SYNTH_AI_BACKEND_CANCEL_GRACE_S": "2"})


@pytest.fixture(scope="module")
def training_backend(tmp_path_factory: pytest.TempPathFactory):
    """A backend that can train the tiny local Qwen3 (built once per session)."""
    yield from serve_backend(tmp_path_factory, "faults-training-backend", tiny=(TINY_TEXT,),
                             env={"SYNTH_AI_BACKEND_WARM_WORKER": "0"})


def run_flows(backend: BackendProcess, workdir: Path, count: int, seed: int, monkeypatch,
              mix: tuple[str, ...] = MIX, workers: int = WORKERS) -> dict:
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    started = time.monotonic()
    with FaultProxy(backend.url, RULES, seed=seed) as proxy:
        with ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(run_flow, mix[i % len(mix)], f"s{seed}-flow-{i:05d}", api_base=f"{proxy.url}/api",
                                   key=backend.key, workdir=workdir, config=CONFIG) for i in range(count)]
            outcomes = [f.result() for f in futures]
        attempts = proxy.log()
    with backend.client() as client:
        files, jobs = backend_records(client)
    flows = {o.flow for o in outcomes}
    files = [f for f in files if f["filename"].removesuffix(".jsonl") in flows]
    problems = {
        "wrong_end": [f"{o.flow} ({o.kind}): {o.status}, expected {o.expected}: {o.error}" for o in outcomes if not o.ok],
        "keys": key_violations(attempts),
        "retries": [p for o in outcomes for p in retry_violations([a for a in attempts if a.flow == o.flow], o.sleeps)],
        "duplicates": duplicate_violations(outcomes, files, jobs),
    }
    faults: dict[str, int] = {}
    by_route: dict[str, dict[str, int]] = {}
    for a in attempts:
        faults[a.fault or "none"] = faults.get(a.fault or "none", 0) + 1
        if a.fault:
            route = by_route.setdefault(route_class(a.method, a.target), {})
            route[a.fault] = route.get(a.fault, 0) + 1
    return {
        "flows": count, "correct": sum(o.ok for o in outcomes), "reruns": sum(o.runs - 1 for o in outcomes),
        "flows_rerun": sum(o.runs > 1 for o in outcomes), "requests": len(attempts),
        "faults_injected": sum(v for k, v in faults.items() if k != "none"), "faults": faults,
        "faults_by_route": by_route,
        "genuine_4xx_delivered": sum(1 for a in attempts if a.fault is None and a.delivered is not None
                                     and 400 <= a.delivered < 500),
        "retry_waits": sum(len(o.sleeps) for o in outcomes), "wall_s": round(time.monotonic() - started, 1),
        "rerun_causes": [e for o in outcomes for e in o.transient],
        "kinds": {k: sum(o.kind == k for o in outcomes) for k in set(mix)}, "problems": problems,
    }


def route_class(method: str, target: str) -> str:
    path = target.split("?", 1)[0]
    if method == "GET":
        return "reads (GET)"
    for suffix, name in (("/start", "start"), ("/cancel", "cancel"), ("/files", "upload"), ("/jobs", "create")):
        if path.endswith(suffix):
            return name
    return path


def _assert_figures(figures: dict) -> None:
    wrong = figures["flows"] - figures["correct"]
    assert wrong <= figures["flows"] // 1000, figures["problems"]["wrong_end"][:10]
    for name in ("keys", "retries", "duplicates"):
        assert not figures["problems"][name], (name, figures["problems"][name][:10])
    assert figures["faults_injected"] >= 0.15 * figures["requests"]  # the faults really were injected
    assert not [k for k in figures["faults"] if k.startswith("upstream-error")], figures["faults"]


def test_flows_end_right_under_a_20_percent_fault_rate(backend, tmp_path, monkeypatch):
    figures = run_flows(backend, tmp_path, FAST_FLOWS, seed=1, monkeypatch=monkeypatch)
    _assert_figures(figures)


@pytest.mark.soak
def test_soak_flows_end_right_under_a_20_percent_fault_rate(backend, tmp_path, monkeypatch):
    count = int(os.environ.get("SYNTH_RELIABILITY_FLOWS", SOAK_FLOWS))
    figures = run_flows(backend, tmp_path, count, seed=2, monkeypatch=monkeypatch)
    out = Path(os.environ.get("SYNTH_RELIABILITY_OUT", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    (out / "transient_faults.json").write_text(json.dumps(figures, indent=1))
    _assert_figures(figures)


@pytest.mark.soak
def test_soak_real_training_succeeds_under_a_20_percent_fault_rate(training_backend, tmp_path, monkeypatch):
    """`train`'s code path, followed to a trained model, with the same faults (one job at a time: real training)."""
    count = int(os.environ.get("SYNTH_RELIABILITY_TRAININGS", SOAK_TRAININGS))
    figures = run_flows(training_backend, tmp_path, count, seed=3, monkeypatch=monkeypatch, mix=("succeed",),
                        workers=1)
    out = Path(os.environ.get("SYNTH_RELIABILITY_OUT", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    (out / "transient_faults_training.json").write_text(json.dumps(figures, indent=1))
    _assert_figures(figures)
    assert figures["correct"] == count, figures["problems"]["wrong_end"]


def _cancelled_sft_job(backend, tmp_path, name: str) -> str:
    """A job that has ended (cancelled before it ran), for follows that must reach its end through faults."""
    from reliability.faults_flows import dataset_for, sft_body

    from backend_support import upload

    with backend.client() as client:
        file_id = upload(client, dataset_for(tmp_path, name)).json()["id"]
        job_id = client.post("/learning/jobs", json=sft_body(file_id)).json()["id"]
        client.post(f"/learning/jobs/{job_id}/cancel").raise_for_status()
    return job_id


def test_following_outlasts_a_run_of_429s_longer_than_the_transport_retries(backend, tmp_path):
    """Five 429s in a row exhaust one poll's retries; the follow polls again instead of giving up."""
    from reliability.faults_flows import open_flow_api

    from synth_ai.client.follow import follow_job

    job_id = _cancelled_sft_job(backend, tmp_path, "follow-429")
    rules = [FaultRule(r"GET /api/learning/jobs/[^/]+/events", ("status:429",), rate=1.0, limit=5)]
    sleeps: list[float] = []
    with FaultProxy(backend.url, rules) as proxy:
        api = open_flow_api(f"{proxy.url}/api", backend.key, "follow-429", sleeps)
        result = follow_job(api.sft, job_id, interval=1.0, timeout=60, sleep=lambda s: None, stream=False)
        api.close()
        injected = [a for a in proxy.log() if a.fault]
    assert result.status == "cancelled"
    assert len(injected) == 5 and len(sleeps) == 4  # the transport retried 4 times, then the follow polled again


def test_the_event_stream_outlasts_a_run_of_429s_like_polling_does(backend, tmp_path):
    """429s on the live stream reconnect (as a poll would try again) instead of ending the follow."""
    from reliability.faults_flows import open_flow_api

    from synth_ai.client.follow import follow_job

    job_id = _cancelled_sft_job(backend, tmp_path, "stream-429")
    rules = [FaultRule(r"GET /api/learning/jobs/[^/]+/events/stream", ("status:429",), rate=1.0, limit=3)]
    with FaultProxy(backend.url, rules) as proxy:
        api = open_flow_api(f"{proxy.url}/api", backend.key, "stream-429", [])
        result = follow_job(api.sft, job_id, interval=1.0, timeout=60, sleep=lambda s: None)
        api.close()
        streams = [a for a in proxy.log() if a.target.split("?", 1)[0].endswith("/events/stream")]
    assert result.status == "cancelled"
    assert sum(1 for a in streams if a.fault) == 3 and len(streams) >= 4  # three refused, then one read to the end


def test_a_task_apps_policy_call_survives_dropped_connections():
    """A chat completion whose connection breaks before the answer is sent again (twice at most)."""
    import asyncio

    from taskapp_support import completion, scripted_model

    from synth_ai.taskapp.errors import InferenceError
    from synth_ai.taskapp.inference import BROKEN_RETRIES, chat_completion

    payload = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
    with scripted_model(lambda body: completion("hello")) as (model_url, model):
        upstream = model_url.removesuffix("/v1")
        for drops in (BROKEN_RETRIES, BROKEN_RETRIES + 1):
            rules = [FaultRule(r"POST .*", ("drop", "reset"), rate=1.0, limit=drops)]
            with FaultProxy(upstream, rules) as proxy:
                if drops == BROKEN_RETRIES:
                    answer = asyncio.run(chat_completion(f"{proxy.url}/v1", payload, record=False))
                    assert answer["choices"][0]["message"]["content"] == "hello"
                else:
                    with pytest.raises(InferenceError) as failed:
                        asyncio.run(chat_completion(f"{proxy.url}/v1", payload, record=False))
                    assert failed.value.code == "inference_unreachable"
                assert len(proxy.log()) == BROKEN_RETRIES + 1  # the first try and its retries, no more


def test_the_checks_catch_each_broken_rule():
    """The harness's checks, fed attempt logs that break one rule each (so a silent check cannot pass the soak)."""
    from reliability.faults_proxy import Attempt

    def attempt(**changes) -> Attempt:
        base = dict(flow="f", method="POST", target="/api/files", key="k1", fault=None, upstream=201, delivered=201)
        return Attempt(**{**base, **changes})

    busy = [attempt(fault="status:503", upstream=None, delivered=503), attempt()]
    assert retry_violations(busy, [0.4]) == []
    assert "outside" in retry_violations(busy, [0.6])[0]
    assert "did not wait" in retry_violations(busy, [])[0]
    told = [attempt(fault="status:429", upstream=None, delivered=429, retry_after=2.0), attempt()]
    assert "asked for 2.0 s" in retry_violations(told, [0.4])[0]
    assert "retried after a 400" in retry_violations([attempt(delivered=400), attempt(delivered=400)], [])[0]
    assert "cannot be retried" in retry_violations([attempt(key=None, fault="drop", delivered=None)], [])[0]
    assert key_violations([attempt(body_tag="a"), attempt(key="k2", body_tag="a")])
