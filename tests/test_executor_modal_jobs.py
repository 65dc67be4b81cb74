"""Jobs on the modal executor beyond the SFT protocol test (tests/test_executor_modal.py): RL jobs (the container
gets the task app's key from the backend and nothing stores it, the policy is reached through a token-guarded URL,
a task app a Modal container could not reach is refused at create time), RL jobs nothing here can run, the job
function trained through Modal's own `.local()`, and the function timeout. The container is emulated
(SYNTH_AI_MODAL_EMULATE): the job function runs in a subprocess started with this backend's environment minus its
secrets, as a Modal container gets none of them."""

from __future__ import annotations

import json
import os
import signal

import httpx
import pytest

from backend_support import TINY_TEXT, BackendProcess, chat_jsonl, link_tiny, sft_body, upload, wait_for
from rl_support import quiz_app, rl_body
from taskapp_support import running_app
from synth_ai.ports import any_free_port

APP_KEY = "sk_env_modal_rl_0123456789abcdef"
NO_KEYS = {"ENVIRONMENT_API_KEY": "", "DEV_ENVIRONMENT_API_KEY": "", "dev_environment_api_key": "",
           "ENVIRONMENT_API_KEY_ALIASES": ""}
MODAL = {"SYNTH_AI_BACKEND_EXECUTOR": "modal", "MODAL_TOKEN_ID": "ak-offline", "MODAL_TOKEN_SECRET": "as-offline",
         "SYNTH_AI_BACKEND_WARM_WORKER": "0", "SYNTH_AI_MODAL_POLL_S": "0.3"}
H100 = {"effective_config": {"compute": {"gpu_type": "H100", "gpu_count": 1}}}  # an SFT job's [compute]


def test_unreachable_task_urls_are_named():
    from synth_ai.backend.executors.remote_needs import unreachable_reason

    for url in ("http://127.0.0.1:8102", "http://localhost:8001", "http://[::1]:9000", "http://0.0.0.0:1",
                "http://10.1.2.3:80", "http://192.168.0.7:8001", "http://169.254.1.1", "http://box.local:80"):
        assert unreachable_reason(url) is not None, url
    for url in ("https://me--color-quiz.modal.run", "http://8.8.8.8:8001", "https://tunnel.example.com"):
        assert unreachable_reason(url) is None, url


def test_an_emulated_container_starts_without_the_backends_secrets():
    from synth_ai.backend.executors.remote_needs import container_environ

    base = {"PATH": "/usr/bin", "ENVIRONMENT_API_KEY": "k1", "OPENAI_API_KEY": "k2", "MODAL_TOKEN_ID": "ak",
            "MODAL_TOKEN_SECRET": "as", "HF_TOKEN": "hf", "SYNTH_API_KEY": "sk", "OMP_NUM_THREADS": "1",
            "ENVIRONMENT_API_KEY_ALIASES": "a,b"}
    env = container_environ({"ENVIRONMENT_API_KEY": "given"}, base)
    assert env == {"PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "ENVIRONMENT_API_KEY": "given"}


def test_the_judge_key_goes_along_when_the_job_has_a_judge(tmp_path):
    from synth_ai.backend.executors.remote_needs import job_secrets

    payload = {"data": {"config": {"judge": {"options": {"provider": "groq", "model": "qwen/qwen3-32b"}}}}}
    assert job_secrets("rl", payload, tmp_path, environ={"GROQ_API_KEY": "gsk-1", "OPENAI_API_KEY": "x"}) == \
        {"GROQ_API_KEY": "gsk-1"}
    assert job_secrets("sft", payload, tmp_path, environ={"GROQ_API_KEY": "gsk-1"}) == {}


def test_the_policy_answers_only_under_its_token_path(monkeypatch, tmp_path_factory, tiny_text_models):
    from synth_ai.backend.inference.engine import InferenceEngine
    from synth_ai.backend.inference.policy_server import LocalPolicyServer
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl.policy_exposure import TUNNEL_ENV, policy_url

    store = ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")  # where tiny_text_models built it
    server = LocalPolicyServer(InferenceEngine(store).get(TINY_TEXT))
    monkeypatch.setenv(TUNNEL_ENV, "modal")
    forwarded: list[int] = []
    url = policy_url(server, forward=lambda port: forwarded.append(port) or "https://abc.r5.modal.host")
    try:
        token = server.path_token
        assert token and len(token) >= 24 and server.bind_host == "0.0.0.0"
        assert url == f"https://abc.r5.modal.host/p/{token}/v1/chat/completions"
        local = f"http://127.0.0.1:{forwarded[0]}"
        body = {"model": TINY_TEXT, "messages": [{"role": "user", "content": "red?"}], "max_tokens": 2}
        with httpx.Client(timeout=60) as client:
            assert client.get(f"{local}/health").status_code == 404
            assert client.post(f"{local}/v1/chat/completions", json=body).status_code == 404
            other = "y" if token.endswith("x") else "x"  # a token ending in x would be its own "wrong" token
            wrong = client.post(f"{local}/p/{token[:-1]}{other}/v1/chat/completions", json=body)
            assert wrong.status_code == 404 and token not in wrong.text
            assert client.get(f"{local}/p/{token}/health").json()["status"] == "ok"
            answer = client.post(f"{local}/p/{token}/v1/chat/completions?cid=c1", json=body)
            assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["role"] == "assistant"
        assert len(server.take_calls("c1")) == 1
    finally:
        server.stop()


def test_an_rl_job_for_modal_with_a_loopback_task_app_is_refused_at_create(tmp_path, tiny_text_models):
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    backend = BackendProcess(data, env={**MODAL, **NO_KEYS}).start()  # real Modal transport: nothing emulated
    try:
        with backend.client() as api:
            refused = api.post("/rl/jobs", json=rl_body("http://127.0.0.1:8102"))
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert error["code"] == "task_app_unreachable" and "loopback" in refused.json()["detail"]
            assert "synth-ai deploy" in error["hint"] and error["details"]["field"] == "data.endpoint_base_url"
            assert api.get("/rl/jobs").json()["data"] == []  # no job was made
    finally:
        backend.stop()


@pytest.mark.slow
def test_an_rl_job_on_modal_takes_the_task_apps_key_along_and_nothing_stores_it(tmp_path, tiny_text_models,
                                                                                 monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("ENVIRONMENT_API_KEY", APP_KEY)  # the task app's key (the app runs in this process)
    data, volume = tmp_path / "data", tmp_path / "volume"
    link_tiny(data, tiny_text_models)
    # The backend knows the key only from the job's body; the policy is reached through its token path.
    env = {**MODAL, **NO_KEYS, "SYNTH_AI_MODAL_EMULATE": str(volume), "SYNTH_AI_POLICY_TUNNEL": "token"}
    backend = BackendProcess(data, env=env).start()
    try:
        with running_app(quiz_app()) as app, backend.client() as api:
            body = rl_body(app, batch_size=2, group_size=2, iterations_per_epoch=1)
            body["data"]["environment_api_key"] = APP_KEY
            created = api.post("/rl/jobs", json=body)
            assert created.status_code == 201, created.text
            job_id = created.json()["id"]
            row = wait_for(lambda: (lambda r: r if r["status"] in {"succeeded", "failed", "cancelled"} else None)(
                api.get(f"/rl/jobs/{job_id}").json()), timeout=300, interval=0.5, what="the Modal RL job")
            log = api.get(f"/rl/jobs/{job_id}/events", params={"since_seq": 0, "limit": 1000}).json()["events"]
            assert row["status"] == "succeeded", (row.get("error"), [e["message"] for e in log[-6:]])
            assert row["fine_tuned_model"] == f"rl:{TINY_TEXT}:{job_id}"
            submitted = next(e for e in log if e["type"] == "rl.remote.submitted")
            assert submitted["data"]["secrets"] == ["ENVIRONMENT_API_KEY"]
            steps = [e for e in log if e["type"] == "rl.train.step"]
            assert steps and steps[0]["data"].get("rollouts.errors", 0) == 0, steps
            models = [m["id"] for m in api.get("/learning/models").json()["data"]]
            assert row["fine_tuned_model"] in models
        leaked = [p for p in [*volume.rglob("*"), *data.rglob("*")]
                  if p.is_file() and p.name != "env_keys.json" and APP_KEY.encode() in p.read_bytes()]
        assert leaked == []  # not on the volume, not in the job's payload, events or logs
        assert APP_KEY not in backend.log()
    finally:
        backend.stop()


def test_an_rl_job_nothing_here_can_run_is_refused_at_create(tmp_path, tiny_text_models):
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    backend = BackendProcess(data, env={"SYNTH_AI_BACKEND_GPUS": "0", "MODAL_TOKEN_ID": "", "MODAL_TOKEN_SECRET": "",
                                        "MODAL_CONFIG_PATH": str(tmp_path / "no-modal.toml")}).start()
    try:
        with backend.client() as api:
            # LoRA: a full 14B would not fit the example's one training H100 either (refused for that first)
            body = rl_body("http://127.0.0.1:8102", tables={"model": {"trainer_mode": "lora"}})
            body["data"]["base_model"] = "Qwen/Qwen3-14B"  # RL-capable, too big for CPU
            refused = api.post("/rl/jobs", json=body)
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert error["code"] == "no_executor" and "modal token set" in error["hint"]
            assert error["details"]["model"] == "Qwen/Qwen3-14B" and error["details"]["local_gpus"] == 0
    finally:
        backend.stop()


def _staged_job(tmp_path, tiny_text_models, steps: int = 3) -> tuple[str, object]:
    """An SFT job created on a backend (never started there) and staged as the relay puts it on the volume."""
    from synth_ai.backend.executors.modal_relay import stage
    from synth_ai.backend.server_settings import BackendSettings
    from synth_ai.backend.store import job_records as J
    from synth_ai.backend.store.db import Database

    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    backend = BackendProcess(data, env={"SYNTH_AI_BACKEND_WARM_WORKER": "0"}).start()
    try:
        with backend.client() as api:
            file_id = upload(api, chat_jsonl(tmp_path / "chat.jsonl", n=4)).json()["id"]
            created = api.post("/learning/jobs", json=sft_body(file_id, steps=steps, per_device_batch=1))
            assert created.status_code == 201, created.text  # created, never started here
            job_id = created.json()["id"]
    finally:
        backend.stop()
    settings = BackendSettings(data_dir=data)
    store = J.JobStore(Database(settings.db_path))
    volume_dir = tmp_path / "vol" / job_id
    stage(settings, store.db, store.get(job_id), volume_dir)
    return job_id, volume_dir


def _job_events(volume_dir, job_id: str) -> list[tuple[str, dict]]:
    import sqlite3

    conn = sqlite3.connect(volume_dir / "backend" / "backend.sqlite3")
    try:
        rows = conn.execute("SELECT type, data FROM events WHERE job_id = ? ORDER BY seq", (job_id,)).fetchall()
    finally:
        conn.close()
    return [(kind, json.loads(data) if data else {}) for kind, data in rows]


@pytest.mark.slow
def test_the_job_function_trains_a_staged_job_on_two_ranks_through_modals_local(tmp_path, tiny_text_models,
                                                                                 monkeypatch):
    """What the relay puts on the volume, run by Modal's own `.local()` of the function `build_app` makes, with
    two ranks in the container (two CPU ranks standing in for its GPUs): torchrun runs there, one rank claims."""
    pytest.importorskip("modal")
    from synth_ai.backend.executors.modal_plan import build_app, plan_for
    from synth_ai.backend.executors.placement import job_needs

    job_id, volume_dir = _staged_job(tmp_path, tiny_text_models)
    plan = plan_for(job_id, job_needs("sft", TINY_TEXT, {"metadata": H100}))
    _, function = build_app(plan, {"ENVIRONMENT_API_KEY": "sk-not-stored"})
    assert len(function._spec_.secrets) == 2  # the named secret and the run's own (modal's private record)
    for name in ("SYNTH_AI_HOME", "SYNTH_AI_BACKEND_EXECUTOR"):  # the job function sets them for itself
        monkeypatch.setenv(name, os.environ.get(name, ""))
    monkeypatch.setenv("SYNTH_AI_BACKEND_TORCHRUN_NPROC", "2")
    monkeypatch.setenv("SYNTH_AI_BACKEND_TORCHRUN_MASTER_PORT", str(any_free_port()))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        result = function.local(job_id, str(volume_dir))
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert result["status"] == "succeeded" and result["exit_code"] == 0, result
    assert result["fine_tuned_model"] == f"ft:{TINY_TEXT}:{job_id}"
    assert (volume_dir / "backend" / "jobs" / job_id / "work" / "final" / "config.json").is_file()
    log = _job_events(volume_dir, job_id)
    assert [kind for kind, _ in log].count("sft.job.running") == 1  # one claim
    started = [data for kind, data in log if kind == "sft.training.started"]
    assert len(started) == 1 and started[0]["world_size"] == 2, started


@pytest.mark.slow
def test_a_modal_call_past_its_timeout_is_cancelled_and_the_job_fails(tmp_path, tiny_text_models):
    data, volume = tmp_path / "data", tmp_path / "volume"
    link_tiny(data, tiny_text_models)
    env = {**MODAL, "SYNTH_AI_MODAL_EMULATE": str(volume), "SYNTH_AI_MODAL_TIMEOUT_S": "2"}
    backend = BackendProcess(data, env=env).start()
    try:
        with backend.client() as api:
            file_id = upload(api, chat_jsonl(tmp_path / "chat.jsonl", n=4)).json()["id"]
            job_id = api.post("/learning/jobs", json={**sft_body(file_id, steps=100000), "metadata": H100}).json()["id"]
            assert api.post(f"/learning/jobs/{job_id}/start").status_code == 200
            row = wait_for(lambda: (lambda r: r if r["status"] in {"succeeded", "failed", "cancelled"} else None)(
                api.get(f"/learning/jobs/{job_id}").json()), timeout=120, interval=0.3, what="the timeout")
            assert row["status"] == "failed" and "ran past the job's timeout (2 s)" in row["error"], row
        call_id = int(json.loads((data / "backend" / "jobs" / job_id / "remote.json").read_text())["call_id"])
        wait_for(lambda: not os.path.exists(f"/proc/{call_id}") or
                 open(f"/proc/{call_id}/stat").read().rsplit(")", 1)[-1].split()[0] == "Z",
                 timeout=60, what="the remote call to be cancelled")
    finally:
        backend.stop()


# A container of a clustered function, with Modal's cluster info as Modal would give node `rank` of two.
CONTAINER = """
import json, sys, types
import modal.experimental
rank = int(sys.argv[3])
modal.experimental.get_cluster_info = lambda: types.SimpleNamespace(
    rank=rank, container_ips=["::1", "::1"], container_ipv4_ips=["127.0.0.1", "127.0.0.1"])
from synth_ai.backend.executors.modal_container import remote_job
print(json.dumps(remote_job(sys.argv[1], sys.argv[2])))
"""


@pytest.mark.slow
def test_two_clustered_containers_train_one_job_with_one_claim(tmp_path, tiny_text_models):
    """nodes = 2: each container reads its place from the cluster info, both start torchrun (1 CPU rank each,
    node 0 the rendezvous), global rank 0 alone claims and reports, and node 1 never writes the volume's data."""
    pytest.importorskip("modal")
    import subprocess
    import sys

    job_id, volume_dir = _staged_job(tmp_path, tiny_text_models, steps=2)
    db_file = volume_dir / "backend" / "backend.sqlite3"
    env = {**os.environ, "SYNTH_AI_BACKEND_TORCHRUN_NPROC": "1", "TMPDIR": str(tmp_path),
           "SYNTH_AI_BACKEND_TORCHRUN_MASTER_PORT": str(any_free_port()), "OMP_NUM_THREADS": "1"}
    nodes = [subprocess.Popen([sys.executable, "-c", CONTAINER, job_id, str(volume_dir), str(rank)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outputs = [node.communicate(timeout=600)[0] for node in nodes]
    results = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    assert results[0]["status"] == "succeeded" and results[0]["exit_code"] == 0, outputs[0][-3000:]
    assert results[1]["exit_code"] == 0 and results[1]["node_rank"] == 1, outputs[1][-3000:]
    assert results[1]["status"] == "queued"  # node 1's own copy of the database: it never saw, nor made, a claim
    log = _job_events(volume_dir, job_id)
    assert [kind for kind, _ in log].count("sft.job.running") == 1  # one job, two ranks, one claim
    started = [data for kind, data in log if kind == "sft.training.started"]
    assert len(started) == 1 and started[0]["world_size"] == 2, started
    private = tmp_path / "synth-ai-node" / job_id / "backend" / "backend.sqlite3"
    assert private.is_file() and not private.is_symlink() and not db_file.is_symlink()
