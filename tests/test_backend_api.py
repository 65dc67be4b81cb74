"""The embedded backend's HTTP API against a real `synth-ai backend serve` process: auth, files, validation,
idempotency, job lifecycle without training, RL answers, verify_task_app against a real task app, models."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import httpx
import pytest
from backend_support import chat_jsonl, serve_backend, sft_body, upload
from starlette.requests import Request
from taskapp_support import ENV_KEY, running_app

LIMIT = 1024 * 1024  # the module's server refuses uploads over 1 MiB


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    yield from serve_backend(tmp_path_factory, "backend-api", env={"SYNTH_AI_BACKEND_MAX_UPLOAD_BYTES": str(LIMIT),
                                                                   "ENVIRONMENT_API_KEY": ENV_KEY})


@pytest.fixture
def api(backend):
    with backend.client() as client:
        yield client


def test_key_file_is_private_and_every_api_route_needs_it(backend):
    key_file = backend.data_dir / "backend_keys.json"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert httpx.get(f"{backend.url}/health").json()["status"] == "ok"  # outside /api: no key needed
    for method, path in [("GET", "/api/files"), ("POST", "/api/learning/jobs"), ("GET", "/api/learning/models"),
                         ("POST", "/api/rl/verify_task_app"), ("POST", "/api/files")]:
        missing = httpx.request(method, backend.url + path)
        assert missing.status_code == 401, path
        body = missing.json()
        assert body["error"]["code"] == "unauthorized" and "Bearer" in body["detail"]
        wrong = httpx.request(method, backend.url + path, headers={"Authorization": "Bearer sk_local_wrong"})
        assert wrong.status_code == 401 and wrong.json()["error"]["message"] == "Invalid API key for this backend."


def test_key_created_later_is_accepted_without_restart(backend):
    from synth_ai.env.backend_keys import create_key, default_key

    assert default_key(backend.data_dir) == backend.key
    extra = create_key("ci", data_dir=backend.data_dir)
    response = httpx.get(f"{backend.url}/api/files", headers={"Authorization": f"Bearer {extra}"})
    assert response.status_code == 200
    assert default_key(backend.data_dir) == backend.key  # adding a key does not change the default


def test_upload_stores_by_sha256_and_validates(api, backend, tmp_path):
    data = chat_jsonl(tmp_path / "train.jsonl")
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    first = upload(api, data)
    assert first.status_code == 201, first.text
    doc = first.json()
    assert doc["status"] == "ready" and doc["sha256"] == digest and doc["bytes"] == data.stat().st_size
    assert doc["purpose"] == "fine-tune" and doc["filename"] == "train.jsonl" and doc["id"].startswith("file_")
    assert doc["summary"]["examples"] == 8
    second = upload(api, data, route="/learning/files")
    assert second.status_code == 201 and second.json()["id"] != doc["id"]
    blobs = [p for p in (backend.data_dir / "backend" / "blobs").rglob("*") if p.is_file() and p.name == digest]
    assert len(blobs) == 1  # the same content twice is one blob
    assert hashlib.sha256(blobs[0].read_bytes()).hexdigest() == digest
    assert api.get(f"/files/{doc['id']}").json()["sha256"] == digest
    assert doc["id"] in [f["id"] for f in api.get("/files").json()["data"]]
    # deleting one record keeps the blob the other still uses; deleting both removes it
    assert api.delete(f"/files/{doc['id']}").json()["deleted"] is True
    assert blobs[0].exists() and api.get(f"/files/{doc['id']}").status_code == 404
    assert api.delete(f"/learning/files/{second.json()['id']}").status_code == 200
    assert not blobs[0].exists()
    assert not list((backend.data_dir / "backend" / "tmp").iterdir())  # no temp file left behind


def test_upload_in_odd_chunk_sizes_is_byte_exact(api, tmp_path):
    """The streaming parser must not depend on where the network splits the body."""
    from synth_ai.client.uploads import multipart_file_body

    payload = os.urandom(300_000) + b"\r\n--not-a-boundary\r\n" + os.urandom(1000)
    path = tmp_path / "blob.bin"
    path.write_bytes(payload)
    chunks, headers = multipart_file_body(path, fields={"purpose": "assets"}, content_type="application/octet-stream")
    whole = b"".join(chunks)
    pieces = [whole[i:i + 7919] for i in range(0, len(whole), 7919)]
    response = api.post("/files", content=iter(pieces), headers=headers)
    assert response.status_code == 201, response.text
    assert response.json()["sha256"] == hashlib.sha256(payload).hexdigest()
    assert response.json()["status"] == "ready"  # not a dataset purpose: stored without validation


def test_invalid_jsonl_is_marked_invalid_and_refused_by_job_create(api, tmp_path):
    bad = tmp_path / "bad.jsonl"
    good_line = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
    bad.write_text(good_line + "\n{not json\n" + json.dumps({"messages": [{"role": "user", "content": "x"}]}) + "\n")
    doc = upload(api, bad).json()
    assert doc["status"] == "invalid" and doc["error_count"] == 2
    assert [e["line"] for e in doc["errors"]] == [2, 3]
    refused = api.post("/learning/jobs", json=sft_body(doc["id"]))
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "invalid_file" and doc["id"] in error["message"] and "bad.jsonl" in error["message"]
    assert "line 2" in error["message"] and [e["line"] for e in error["details"]["errors"]] == [2, 3]
    missing = api.post("/learning/jobs", json=sft_body("file_doesnotexist"))
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "file_not_found"
    assert "file_doesnotexist" in missing.json()["detail"]


def test_oversized_upload_is_413_and_leaves_nothing(api, backend, tmp_path):
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"x" * (LIMIT + 200_000))
    response = upload(api, big)
    assert response.status_code == 413
    assert "SYNTH_AI_BACKEND_MAX_UPLOAD_BYTES" in response.json()["detail"]
    # without Content-Length (chunked), the limit is enforced while streaming
    from synth_ai.client.uploads import multipart_file_body

    chunks, headers = multipart_file_body(big, fields={"purpose": "fine-tune"})
    headers.pop("Content-Length")
    streamed = api.post("/files", content=chunks, headers=headers)
    assert streamed.status_code == 413
    assert not list((backend.data_dir / "backend" / "tmp").iterdir())


def test_malformed_uploads_are_400(api, tmp_path):
    assert api.post("/files", json={"purpose": "fine-tune"}).status_code == 400
    path = chat_jsonl(tmp_path / "t.jsonl")
    with open(path, "rb") as handle:
        no_purpose = api.post("/files", files={"file": ("t.jsonl", handle)})
    assert no_purpose.status_code == 400 and no_purpose.json()["error"]["code"] == "missing_purpose"
    no_file = api.post("/files", data={"purpose": "fine-tune"}, files={"other": ("x", b"1")})
    assert no_file.status_code == 400



def test_form_fields_are_bounded_even_when_streamed(api, backend):
    # many small fields (each under the per-field cap), sent chunked, then a valid file part: refused while
    # streaming instead of piling the fields up in the server's memory
    def body():
        for i in range(60):
            yield b'--B\r\nContent-Disposition: form-data; name="f%d"\r\n\r\n' % i + b"x" * 60_000 + b"\r\n"
        yield b'--B\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nfine-tune\r\n'
        yield (b'--B\r\nContent-Disposition: form-data; name="file"; filename="t.jsonl"\r\n\r\n'
               b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'
               b"\r\n--B--\r\n")

    response = api.post("/files", content=body(), headers={"Content-Type": "multipart/form-data; boundary=B"})
    assert response.status_code == 400, response.text
    assert "form fields" in response.json()["detail"]
    assert not list((backend.data_dir / "backend" / "tmp").iterdir())

def test_idempotent_creates(api, tmp_path):
    data = chat_jsonl(tmp_path / "idem.jsonl")
    a = upload(api, data, headers={"Idempotency-Key": "up-1"})
    b = upload(api, data, headers={"Idempotency-Key": "up-1"})
    assert a.status_code == b.status_code == 201 and a.json()["id"] == b.json()["id"]
    assert b.headers.get("idempotent-replayed") == "true"
    other = tmp_path / "other.jsonl"
    chat_jsonl(other, n=3)
    assert upload(api, other, headers={"Idempotency-Key": "up-1"}).status_code == 409

    body = sft_body(a.json()["id"])
    first = api.post("/learning/jobs", json=body, headers={"Idempotency-Key": "job-1"})
    again = api.post("/learning/jobs", json=body, headers={"Idempotency-Key": "job-1"})
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    changed = api.post("/learning/jobs", json={**body, "hyperparameters": {"n_epochs": 2}},
                       headers={"Idempotency-Key": "job-1"})
    assert changed.status_code == 409 and changed.json()["error"]["code"] == "idempotency_conflict"
    jobs = api.get("/learning/jobs", params={"limit": 500}).json()["data"]
    assert sum(1 for j in jobs if j["id"] == first.json()["id"]) == 1
    fresh = api.post("/learning/jobs", json=body)
    assert fresh.json()["id"] != first.json()["id"]  # no key: a new job each time


def test_job_lifecycle_without_training(api, tmp_path):
    file_id = upload(api, chat_jsonl(tmp_path / "c.jsonl")).json()["id"]
    created = api.post("/learning/jobs", json=sft_body(file_id))
    assert created.status_code == 201
    job = created.json()
    assert job["status"] == "created" and job["job_id"] == job["id"] and job["training_file_id"] == file_id
    assert job["model"] == "synth-ai/tiny-qwen3"
    assert api.delete(f"/files/{file_id}").status_code == 409  # in use by an active job
    cancelled = api.post(f"/learning/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    events = api.get(f"/learning/jobs/{job['id']}/events", params={"since_seq": 0}).json()["events"]
    assert [e["type"] for e in events] == ["sft.job.created", "sft.job.cancelled"]
    assert [e["seq"] for e in events] == [1, 2]
    assert api.get(f"/learning/jobs/{job['id']}/events", params={"since_seq": 1}).json()["events"][0]["seq"] == 2
    timeline = api.get(f"/learning/jobs/{job['id']}/timeline").json()["events"]
    assert [t["phase"] for t in timeline] == ["created", "cancelled"]
    status = api.get(f"/learning/jobs/{job['id']}/status").json()
    assert status["status"] == "cancelled" and status["last_event"]["type"] == "sft.job.cancelled"
    listed = api.get("/learning/jobs", params={"status": "cancelled"}).json()["data"]
    assert job["id"] in [j["id"] for j in listed] and all(j["status"] == "cancelled" for j in listed)
    assert api.get("/learning/jobs", params={"status": "bogus"}).status_code == 400
    assert api.get("/learning/jobs", params={"type": "sft_offline"}).json()["data"]
    assert api.get("/learning/jobs", params={"type": "rl_online"}).json()["data"] == []
    assert api.get(f"/learning/jobs/{job['id']}/metrics").json()["points"] == []
    assert api.get("/learning/jobs/job_nope").status_code == 404


def test_job_create_checks_the_payload(api, tmp_path):
    file_id = upload(api, chat_jsonl(tmp_path / "p.jsonl")).json()["id"]
    cases = [
        ({**sft_body(file_id), "model": "Qwen/Qwen9-Imaginary"}, "invalid_model", "not supported"),
        ({**sft_body(file_id), "model": "ft:Qwen/Qwen3-4B:job_x"}, "invalid_model", "base model is required"),
        ({**sft_body(file_id), "hyperparameters": {}}, "invalid_job", "must not be empty"),
        ({**sft_body(file_id), "hyperparameters": {"learning_rate": 0.1}}, "invalid_job", "at least one of"),
        ({**sft_body(file_id), "hyperparameters": {"n_epochs": 0}}, "invalid_job", "n_epochs"),
        ({**sft_body(file_id), "hyperparameters": {"n_epochs": 1, "train_kind": "dpo"}}, "invalid_job", "dpo"),
        ({k: v for k, v in sft_body(file_id).items() if k != "training_file_id"}, "invalid_job", "training file"),
    ]
    for body, code, text in cases:
        response = api.post("/learning/jobs", json=body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["code"] == code and text in response.json()["detail"], response.text
    assert api.post("/learning/jobs", content=b"[1,2", headers={"Content-Type": "application/json"}).status_code == 422


def test_rl_create_queues_when_valid_and_refuses_a_dead_task_app_or_a_bad_body(api, monkeypatch):
    from conftest import free_port
    from taskapp_support import math_entry

    from synth_ai.taskapp import create_task_app

    body = {"job_type": "rl", "compute": {"gpu_type": "H100", "gpu_count": 1},
            "data": {"endpoint_base_url": f"http://127.0.0.1:{free_port()}/", "base_model": "Qwen/Qwen3-0.6B",
                     "config": {"algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"}}},
            "tags": {"source": "train-cli"}}
    dead = api.post("/rl/jobs", json=body, headers={"Idempotency-Key": "rl-0"})
    assert dead.status_code == 400  # valid, but nothing listens at the task URL: refused before any job
    assert dead.json()["error"]["code"] == "task_app_unreachable"
    assert "cannot be reached" in dead.json()["detail"]
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)  # the key the backend was started with
    with running_app(create_task_app(math_entry().config_factory())) as base:
        body["data"]["endpoint_base_url"] = base
        response = api.post("/rl/jobs", json=body, headers={"Idempotency-Key": "rl-1"})
    assert response.status_code == 201, response.text  # RL jobs start on create (the GSPO trainer runs them)
    assert response.json()["status"] in {"queued", "running", "failed"}
    assert response.json()["id"].startswith("rljob_")
    bad = api.post("/rl/jobs", json={**body, "data": {**body["data"], "base_model": "Qwen/Qwen3-32B"}})
    assert bad.status_code == 400 and "RL" in bad.json()["detail"]
    assert api.post("/rl/jobs", json={"job_type": "rl"}).status_code == 400
    assert api.get("/rl/jobs/rljob_missing").status_code == 404
    assert [j["id"] for j in api.get("/rl/jobs").json()["data"]] == [response.json()["id"]]


def test_verify_task_app_against_a_real_task_app(api, monkeypatch):
    from synth_ai.taskapp import TaskAppConfig, TaskInfo, create_task_app

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    info = TaskInfo(task={"id": "toy", "name": "Toy", "version": "0.1"}, environment="toy",
                    dataset={"id": "toy", "splits": ["train"]})
    config = TaskAppConfig(app_id="toy-app", name="Toy", description="toy", base_task_info=info,
                           describe_taskset=lambda: {"id": "toy"},
                           provide_task_instances=lambda seeds: [info for _ in seeds],
                           rollout=lambda request, _: None)
    with running_app(create_task_app(config)) as base:
        doc = api.post("/rl/verify_task_app", json={"endpoint_base_url": base + "/"}).json()
    assert doc["any_ok"] is True
    assert doc["endpoint_base_url"] == base
    assert [a["path"] for a in doc["attempts"]] == ["/health", "/task_info"]
    assert all(a["status"] == 200 for a in doc["attempts"])
    assert doc["candidates_first15"] == ["sk_e…ef"]
    assert ENV_KEY not in json.dumps(doc)  # keys are only ever shown masked

    # a task app that knows another key: every header style is tried, none works
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "sk_env_someone_else_000000")
    with running_app(create_task_app(config)) as base:
        doc = api.post("/rl/verify_task_app", json={"endpoint_base_url": base}).json()
    assert doc["any_ok"] is False
    assert {a["header"] for a in doc["attempts"]} == {"X-API-Key", "X-API-Keys", "Authorization"}
    assert all(a["status"] == 400 for a in doc["attempts"])

    from conftest import free_port

    down = api.post("/rl/verify_task_app", json={"endpoint_base_url": f"http://127.0.0.1:{free_port()}"}).json()
    assert down["any_ok"] is False and down["attempts"][0]["status"] is None and down["attempts"][0]["error"]
    assert api.post("/rl/verify_task_app", json={"endpoint_base_url": "ftp://x"}).status_code == 400


def test_models_lists_local_base_models(api):
    models = api.get("/learning/models").json()["data"]
    ids = {m["id"] for m in models}
    assert {"synth-ai/tiny-qwen3", "synth-ai/tiny-qwen3-vl"} <= ids
    tiny = api.get("/learning/models/synth-ai/tiny-qwen3").json()
    assert tiny["kind"] == "base" and tiny["family"] == "Qwen3" and "path" not in tiny
    assert api.get("/learning/models/Qwen/Qwen3-235B-A22B-Instruct-2507").status_code == 404
    assert {m["id"] for m in api.get("/inference/v1/models").json()["data"]} >= {"synth-ai/tiny-qwen3"}



def test_out_of_range_paging_numbers_are_422_not_500(api, tmp_path):
    job = api.post("/learning/jobs", json=sft_body(upload(api, chat_jsonl(tmp_path / "p.jsonl")).json()["id"]))
    job_id = job.json()["id"]
    huge = str(2**70)
    for route, params in (("/files", {"offset": huge}), ("/learning/jobs", {"offset": huge}),
                          ("/rl/jobs", {"offset": huge}), (f"/learning/jobs/{job_id}/events", {"since_seq": huge}),
                          (f"/learning/jobs/{job_id}/metrics", {"after_step": huge})):
        response = api.get(route, params=params)
        assert response.status_code == 422, (route, response.text)
        assert response.json()["error"]["code"] == "invalid_request"

def test_unknown_route_is_json_404(api):
    response = api.get("/learning/nothing/here")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_cli_status_start_stop(cli, tmp_path):
    from conftest import free_port

    port = free_port()
    before = cli("backend", "status", "--json")
    assert before.json()["running"] is False and before.exit_code == 10  # scripts test it to decide to start one
    started = cli("backend", "start", "--port", str(port), "--json")
    assert started.exit_code == 0, started.stderr
    doc = started.json()
    assert doc["running"] and doc["healthy"] and doc["url"] == f"http://127.0.0.1:{port}"
    try:
        answered = cli("backend", "status", "--json")
        status = answered.json()
        assert status["pid"] == doc["pid"] and status["running"] and answered.exit_code == 0
        from synth_ai.backend.daemon import find_local_backend

        found = find_local_backend()
        assert found["api_base"] == f"http://127.0.0.1:{port}/api" and found["api_key"].startswith("sk_local_")
        with httpx.Client() as client:
            assert client.get(f"{found['api_base']}/files",
                              headers={"Authorization": f"Bearer {found['api_key']}"}).status_code == 200
        again = cli("backend", "start", "--port", str(port), "--json").json()
        assert again["already_running"] is True and again["pid"] == doc["pid"]
        serve = cli("backend", "serve", "--port", str(free_port()))
        assert serve.exit_code == 3 and "already running" in serve.stderr
    finally:
        stopped = cli("backend", "stop", "--json")
    assert stopped.json()["was_running"] is True
    after = cli("backend", "status", "--json")
    assert after.json()["running"] is False and after.exit_code == 10
    assert Path(doc["log_file"]).exists()


def test_verify_task_app_hides_key_fragments_and_follows_no_redirect(api):
    """A synth-ai 0.2.17 task app answers a wrong key with the first 15 characters of its keys; the backend's
    report must not pass them on, and a redirect must not carry the keys to another host."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, RedirectResponse

    leaky = FastAPI()
    seen_elsewhere: list[str] = []

    @leaky.get("/health")
    def health() -> JSONResponse:
        return JSONResponse({"detail": {"error": {"code": "unauthorised", "allowed_first15": [ENV_KEY[:15]],
                                                  "got_first15": [ENV_KEY[:15]], "note": f"key {ENV_KEY}"}}},
                            status_code=400)

    elsewhere = FastAPI()

    @elsewhere.get("/task_info")
    def stolen(request: Request) -> dict:
        seen_elsewhere.append(request.headers.get("x-api-key", ""))
        return {}

    with running_app(elsewhere) as other:
        redirecting = FastAPI()

        @redirecting.get("/health")
        def ok() -> dict:
            return {"healthy": True}

        @redirecting.get("/task_info")
        def moved() -> RedirectResponse:
            return RedirectResponse(f"{other}/task_info")

        with running_app(leaky) as base:
            doc = api.post("/rl/verify_task_app", json={"endpoint_base_url": base}).json()
        with running_app(redirecting) as base:
            redirected = api.post("/rl/verify_task_app", json={"endpoint_base_url": base}).json()
    text = json.dumps(doc)
    assert doc["any_ok"] is False
    assert ENV_KEY[:15] not in text and ENV_KEY not in text
    assert redirected["any_ok"] is False
    assert seen_elsewhere == [], "the keys were sent to the host a redirect named"


def test_an_unexpected_error_never_echoes_a_key(tmp_path):
    """The generic 500 answer quotes the exception; any key the backend knows is masked in it."""
    from starlette.testclient import TestClient

    from synth_ai.backend.api.app import create_app
    from synth_ai.env.backend_keys import default_key
    from synth_ai.backend.server_settings import BackendSettings

    app = create_app(BackendSettings.load(data_dir=tmp_path / "data"))

    @app.get("/api/boom")
    def boom() -> None:
        raise RuntimeError(f"could not use {default_key(tmp_path / 'data')}")

    with TestClient(app, raise_server_exceptions=False) as client:
        key = default_key(tmp_path / "data")
        response = client.get("/api/boom", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 500
    assert "could not use" in response.text and key not in response.text


def _rl_job_ids(api) -> list[str]:
    return [j["id"] for j in api.get("/rl/jobs").json()["data"]]


def test_rl_create_refuses_a_judge_whose_provider_key_the_backend_lacks(api, backend):
    """Refused at create (before any task-app probe or job), naming the variable, not ten minutes into the run."""
    before = _rl_job_ids(api)  # ids only: another test's job may move from queued to running meanwhile
    config = {"algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"},
              "judge": {"options": {"provider": "gemini", "model": "gemini-2.5-flash"}}}
    body = {"job_type": "rl", "data": {"endpoint_base_url": "http://127.0.0.1:9", "base_model": "Qwen/Qwen3-4B",
                                       "config": config}}
    response = api.post("/rl/jobs", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "missing_judge_api_key"
    assert "GEMINI_API_KEY is not set in the backend's environment" in response.json()["detail"]
    config["judge"]["options"]["provider"] = "anthropic"
    bad = api.post("/rl/jobs", json=body)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_judge"
    assert "provider must be one of openai, groq, gemini" in bad.json()["detail"]
    assert _rl_job_ids(api) == before  # nothing was created
    training = {"step_rewards_enabled": True, "step_rewards_mode": "dense"}
    wrong_mode = api.post("/rl/jobs", json={**body, "data": {**body["data"], "config": {**config, "judge": None,
                                                                                          "training": training}}})
    assert wrong_mode.status_code == 400 and "[training].step_rewards_mode must be one of off, env_sparse, " \
        "decision_stepwise (found 'dense')" in wrong_mode.json()["detail"]
