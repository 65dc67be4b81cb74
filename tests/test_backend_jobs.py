"""SFT jobs that really train (tiny Qwen3, a few steps, CPU) through a real backend process: success with events,
metrics and a usable fine-tuned model; cancel of a running job; the backend killed with SIGKILL mid-job and
restarted (the job resumes from its checkpoint and succeeds, the uploaded file still verifies)."""

from __future__ import annotations

import hashlib
import json
import os
import signal

import pytest
from backend_support import (
    BackendProcess,
    chat_jsonl,
    events,
    job_status,
    link_tiny,
    picture_jsonl,
    sft_body,
    upload,
    wait_for,
)

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow


@pytest.fixture
def backend(tmp_path, tiny_models):
    data = tmp_path / "data"
    link_tiny(data, tiny_models)
    proc = BackendProcess(data, env={"SYNTH_AI_BACKEND_CANCEL_GRACE_S": "20"}).start()
    yield proc
    proc.stop()


def _processes_of_job(job_id: str) -> list[int]:
    """Live worker processes of the job: cold ones name it on their command line, a warm one works in its folder."""
    from synth_ai.backend.jobs.process_contract import is_worker_of

    return [int(pid) for pid in filter(str.isdigit, os.listdir("/proc")) if is_worker_of(int(pid), job_id)]


def _check_succeeded_job(api, job_id: str, backend: BackendProcess, steps: int, base: str) -> str:
    final = api.get(f"/learning/jobs/{job_id}").json()
    log = events(api, job_id)
    assert final["status"] == "succeeded", (final, log[-3:], backend.log())
    expected = f"ft:{base}:{job_id}"
    assert final["fine_tuned_model"] == expected

    types = [e["type"] for e in log]
    for needed in ("sft.job.created", "sft.job.queued", "sft.job.running", "sft.training.started", "sft.progress",
                   "sft.validation.summary", "sft.job.completed"):
        assert needed in types, types
    assert types[-1] == "sft.job.completed" and log[-1]["data"]["fine_tuned_model"] == expected
    seqs = [e["seq"] for e in log]
    assert seqs == list(range(1, len(seqs) + 1))

    points = api.get(f"/learning/jobs/{job_id}/metrics", params={"after_step": -1, "limit": 1000}).json()["points"]
    by_name: dict[str, dict[int, float]] = {}
    for p in points:
        by_name.setdefault(p["name"], {})[p["step"]] = p["value"]
    assert {"train.loss", "val.loss", "learning_rate", "tokens_per_second"} <= set(by_name)
    loss = by_name["train.loss"]
    assert sorted(loss) == list(range(steps))  # step 0 included
    assert loss[steps - 1] < loss[0]  # it learned something
    later = api.get(f"/learning/jobs/{job_id}/metrics", params={"after_step": 3}).json()["points"]
    assert later and all(p["step"] > 3 for p in later)
    assert [t["phase"] for t in api.get(f"/learning/jobs/{job_id}/timeline").json()["events"]] == [
        "created", "queued", "running", "succeeded"]
    return expected


def test_sft_jobs_train_report_and_serve(tmp_path, tiny_models):
    """Full fine-tune and LoRA on tiny Qwen3 and LoRA on tiny Qwen3-VL with images, side by side (three worker
    slots), then every fine-tuned model answers at the inference endpoint."""
    data = tmp_path / "data"
    link_tiny(data, tiny_models)
    backend = BackendProcess(data, env={"SYNTH_AI_BACKEND_MAX_JOBS": "3"}).start()
    steps = 12
    text, vl = "synth-ai/tiny-qwen3", "synth-ai/tiny-qwen3-vl"
    try:
        with backend.client() as api:
            files = {
                text: (upload(api, chat_jsonl(tmp_path / "train.jsonl", n=12)).json(),
                       upload(api, chat_jsonl(tmp_path / "val.jsonl", n=4)).json()),
                vl: (upload(api, picture_jsonl(tmp_path / "pictures.jsonl", n=12)).json(),
                     upload(api, picture_jsonl(tmp_path / "pictures-val.jsonl", n=3)).json()),
            }
            assert files[vl][0]["status"] == "ready" and files[vl][0]["summary"]["images"] == 12
            jobs = {}
            for name, model, mode, lr in (("full", text, "full", 1e-3), ("lora", text, "lora", 5e-3),
                                          ("vl-lora", vl, "lora", 5e-3)):
                train, val = files[model]
                body = sft_body(train["id"], steps=steps, model=model, eval_steps=6, logging_steps=1,
                                train_kind=mode, learning_rate=lr, sequence_length=256)
                body["metadata"] = {"effective_config": {"data": {"validation_files": [val["id"]]}}}
                job = api.post("/learning/jobs", json=body).json()
                assert job["validation_file_id"] == val["id"] and job["status"] == "created", job
                started = api.post(f"/learning/jobs/{job['id']}/start", json={}, headers={"Idempotency-Key": name})
                assert started.status_code == 200 and started.json()["status"] in {"queued", "running"}
                jobs[name] = (job["id"], model)
            for job_id, _ in jobs.values():
                wait_for(lambda j=job_id: job_status(api, j) in {"succeeded", "failed", "cancelled"}, timeout=150,
                         interval=0.5, what="the jobs to finish")
            models = {name: _check_succeeded_job(api, job_id, backend, steps, model)
                      for name, (job_id, model) in jobs.items()}

            listed = {m["id"]: m for m in api.get("/learning/models").json()["data"]}
            picture = json.loads(picture_jsonl(tmp_path / "ask.jsonl", n=1).read_text())["messages"][0]
            for name, model_id in models.items():
                job_id, base = jobs[name]
                assert listed[model_id]["kind"] == "fine_tuned" and listed[model_id]["job_id"] == job_id
                assert api.get(f"/learning/models/{model_id}").json()["base_model"] == base
                question = picture if base == vl else {"role": "user", "content": "What is 2 plus 2?"}
                answer = api.post("/inference/v1/chat/completions", json={
                    "model": model_id, "messages": [question], "max_tokens": 8, "temperature": 0})
                assert answer.status_code == 200, answer.text
                assert answer.json()["choices"][0]["message"]["role"] == "assistant"
                assert answer.json()["usage"]["completion_tokens"] >= 1
            missing = api.post("/inference/v1/chat/completions", json={
                "model": "ft:synth-ai/tiny-qwen3:job_unknown", "messages": [{"role": "user", "content": "hi"}]})
            assert missing.status_code == 404
            assert api.post("/inference/v1/chat/completions", json={"model": models["full"]}).status_code == 400
            assert api.delete(f"/files/{files[text][1]['id']}").status_code == 200  # its jobs are finished
    finally:
        backend.stop()


def test_cancel_stops_a_running_worker(backend, tmp_path):
    with backend.client() as api:
        file_id = upload(api, chat_jsonl(tmp_path / "c.jsonl")).json()["id"]
        created = api.post("/learning/jobs", json=sft_body(file_id, steps=100_000, logging_steps=1))
        assert created.status_code == 201, created.text
        job = created.json()
        api.post(f"/learning/jobs/{job['id']}/start")
        wait_for(lambda: any(e["type"] == "sft.progress" for e in events(api, job["id"])), timeout=90,
                 what="training progress")
        # one job runs at a time (SYNTH_AI_BACKEND_MAX_JOBS=1): a second one waits in the queue
        second = api.post("/learning/jobs", json=sft_body(file_id, steps=100_000)).json()
        assert api.post(f"/learning/jobs/{second['id']}/start").json()["status"] == "queued"
        assert job_status(api, second["id"]) == "queued"
        response = api.post(f"/learning/jobs/{job['id']}/cancel")
        assert response.status_code == 200
        assert response.json()["status"] == "cancelled", events(api, job["id"])[-4:]
        log = events(api, job["id"])
        types = [e["type"] for e in log]
        assert "sft.job.cancel_requested" in types and types[-1] == "sft.job.cancelled"
        stopped = next(e for e in log if e["type"] == "sft.training.stopped")  # why, not "as asked"
        assert stopped["message"].endswith(" because the job was cancelled."), stopped
        assert "sft.job.completed" not in types
        row = api.get(f"/learning/jobs/{job['id']}").json()
        assert row["fine_tuned_model"] is None and row["finished_at"]
        assert api.post(f"/learning/jobs/{job['id']}/cancel").json()["status"] == "cancelled"  # idempotent
        # the queued job gets the slot; cancelling it while its worker starts up still ends it cleanly
        assert api.post(f"/learning/jobs/{second['id']}/cancel").json()["status"] == "cancelled"
        # a worker spawned for it as the slot freed looks, finds it cancelled and leaves: wait for that, then check
        # that it changed nothing on its way out
        wait_for(lambda: not _processes_of_job(second["id"]), timeout=120, what="its worker to leave")
        assert job_status(api, second["id"]) == "cancelled"
        assert events(api, second["id"])[-1]["type"] == "sft.job.cancelled"
        assert api.post(f"/learning/jobs/{job['id']}/start").json()["status"] == "cancelled"  # no restart


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_backend_killed_mid_job_resumes_after_restart(tmp_path, tiny_models, how):
    data = tmp_path / "data"
    link_tiny(data, tiny_models)
    first = BackendProcess(data).start()
    try:
        with first.client() as api:
            source = chat_jsonl(tmp_path / "k.jsonl", n=16)
            digest = hashlib.sha256(source.read_bytes()).hexdigest()
            file_id = upload(api, source).json()["id"]
            job = api.post("/learning/jobs", json=sft_body(file_id, steps=400, save_steps=50,
                                                           logging_steps=25)).json()
            api.post(f"/learning/jobs/{job['id']}/start")
            wait_for(lambda: any(e["type"] == "sft.checkpoint.saved" for e in events(api, job["id"])),
                     timeout=120, what="a checkpoint")
            before_kill = api.get(f"/learning/jobs/{job['id']}").json()
    finally:
        first.kill(how)  # SIGKILL: the worker learns it from the kernel; SIGTERM: the backend stops it
    assert before_kill["status"] == "running"

    second = BackendProcess(data).start()
    try:
        with second.client() as api:
            wait_for(lambda: job_status(api, job["id"]) in {"succeeded", "failed", "cancelled"}, timeout=150,
                     interval=0.5, what="the resumed job to finish")
            final = api.get(f"/learning/jobs/{job['id']}").json()
            log = events(api, job["id"])
            types = [e["type"] for e in log]
            assert final["status"] == "succeeded", (final, log[-5:], second.log())
            assert final["attempts"] == 2
            interrupted = next(e for e in log if e["type"] == "sft.worker.interrupted")
            why = ("the backend process went away (it was killed or crashed)" if how == signal.SIGKILL
                   else "the backend is shutting down (stopped or restarting)")
            assert f"because {why};" in interrupted["message"]
            stopped = next(e for e in log if e["type"] == "sft.training.stopped")  # nobody asked: it says why
            assert stopped["message"].endswith(f" because {why}.") and stopped["data"]["reason"] == why, stopped
            assert "sft.job.requeued" in types and "sft.training.resumed" in types
            resumed = next(e for e in log if e["type"] == "sft.training.resumed")
            assert resumed["data"]["step"] >= 50
            assert types[-1] == "sft.job.completed"
            steps = {p["step"] for p in api.get(f"/learning/jobs/{job['id']}/metrics",
                                                params={"name": "train.loss", "limit": 5000}).json()["points"]}
            assert steps == set(range(400))  # no hole where the kill happened
            doc = api.get(f"/files/{file_id}").json()
            assert doc["sha256"] == digest and doc["status"] == "ready"
            blob = data / "backend" / "blobs" / digest[:2] / digest
            assert hashlib.sha256(blob.read_bytes()).hexdigest() == digest
    finally:
        second.stop()
