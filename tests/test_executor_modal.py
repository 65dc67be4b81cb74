"""The modal executor's submit / stream / reattach / cancel protocol against a real backend, with the Modal function
body (the job worker) run in a subprocess on a local folder standing in for the volume (SYNTH_AI_MODAL_EMULATE).
A fine-tune that exists only on this backend, used as the base of the next Modal job, is uploaded with it."""

from __future__ import annotations

import json
import os
import signal

import pytest

from backend_support import (
    TINY_TEXT,
    BackendProcess,
    chat_jsonl,
    events,
    link_tiny,
    sft_body,
    upload,
    wait_for,
)

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

STEPS = 40  # long enough that the first remote run is still training when it is held


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _kill_remote_runs(data) -> None:
    """End every emulated remote run (a process group per call) the backend recorded: a failing test must not leave
    them training, held or not, after it."""
    for state in (data / "backend" / "jobs").glob("*/remote.json"):
        try:
            os.killpg(int(json.loads(state.read_text())["call_id"]), signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


def test_submit_stream_reattach_after_a_backend_crash_and_cancel(tmp_path, tiny_text_models):
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    volume = tmp_path / "volume"
    env = {"SYNTH_AI_BACKEND_EXECUTOR": "modal", "MODAL_TOKEN_ID": "ak-offline", "MODAL_TOKEN_SECRET": "as-offline",
           "SYNTH_AI_MODAL_EMULATE": str(volume), "SYNTH_AI_MODAL_POLL_S": "0.3", "SYNTH_AI_BACKEND_WARM_WORKER": "0",
           "SYNTH_AI_BACKEND_MAX_JOBS": "2", "SYNTH_AI_BACKEND_CANCEL_GRACE_S": "5"}
    first = BackendProcess(data, env=env).start()
    api = first.client()
    file_id = upload(api, chat_jsonl(tmp_path / "chat.jsonl", n=8)).json()["id"]
    compute = {"effective_config": {"compute": {"gpu_type": "H100", "gpu_count": 1}}}
    odd = {**sft_body(file_id), "metadata": {"effective_config": {"compute": {"gpu_type": "RTX-9090",
                                                                              "gpu_count": 1}}}}
    refused = api.post("/learning/jobs", json=odd)  # what Modal cannot give is refused before any job exists
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_compute", refused.text
    assert "not a Modal GPU" in refused.json()["detail"]
    ids: list[str] = []
    call_ids: dict[str, str] = {}
    for steps in (STEPS, 100000):
        body = {**sft_body(file_id, steps=steps, per_device_batch=2), "metadata": compute}
        created = api.post("/learning/jobs", json=body, headers={"Idempotency-Key": f"modal-{steps}"})
        assert created.status_code == 201, created.text
        again = api.post("/learning/jobs", json=body, headers={"Idempotency-Key": f"modal-{steps}"})
        assert again.json()["id"] == created.json()["id"]  # a retried create is the same job
        ids.append(created.json()["id"])
        assert api.post(f"/learning/jobs/{ids[-1]}/start").status_code == 200
    done_job, cancel_job = ids

    def metric_seen(job_id):
        return api.get(f"/learning/jobs/{job_id}/metrics", params={"name": "train.loss"}).json()["points"]

    def call_of(job_id):
        return int(json.loads((data / "backend" / "jobs" / job_id / "remote.json").read_text())["call_id"])

    try:
        wait_for(lambda: metric_seen(done_job), timeout=240, interval=0.3, what="metrics from the first remote job")
        # Hold the first remote run mid-training (the emulated container is that process group) so that it is
        # still running when the backend dies, however long the second job takes to start.
        os.killpg(call_of(done_job), signal.SIGSTOP)
        assert _alive(call_of(done_job)), "the first remote job ended before it could be held"
        wait_for(lambda: metric_seen(cancel_job), timeout=240, interval=0.3, what="metrics from the second job")
    except AssertionError:
        log = first.log()
        first.kill(signal.SIGKILL)
        _kill_remote_runs(data)
        raise AssertionError(log) from None
    submitted = [e for e in events(api, done_job) if e["type"] == "sft.remote.submitted"]
    assert len(submitted) == 1 and submitted[0]["data"]["gpu"] == "H100:1"
    assert submitted[0]["data"]["ranks"] == 1  # one GPU, one rank
    call_ids.update({j: json.loads((data / "backend" / "jobs" / j / "remote.json").read_text())["call_id"] for j in ids})
    first.kill(signal.SIGKILL)  # the backend dies while both remote jobs run; they keep running

    second = BackendProcess(data, port=first.port, env=env).start()
    os.killpg(int(call_ids[done_job]), signal.SIGCONT)  # the held run goes on; the new backend reattaches to it
    try:
        api = second.client()

        def finished(job_id):
            row = api.get(f"/learning/jobs/{job_id}").json()
            return row if row["status"] in {"succeeded", "failed", "cancelled"} else None

        row = wait_for(lambda: finished(done_job), timeout=240, interval=0.3, what="the reattached job")
        log = events(api, done_job)
        assert row["status"] == "succeeded", (row, log[-4:], second.log())
        assert row["fine_tuned_model"] == f"ft:{TINY_TEXT}:{done_job}"
        types = [e["type"] for e in log]
        assert types.count("sft.remote.submitted") == 1 and "sft.remote.reattached" in types  # never submitted twice
        assert types.count("sft.training.started") == 1 and types[-1] == "sft.job.completed"
        losses = {p["step"] for p in metric_seen(done_job)}
        assert losses == set(range(STEPS))  # every step's point arrived, across the restart
        assert row["fine_tuned_model"] in [m["id"] for m in api.get("/learning/models").json()["data"]]
        assert (data / "backend" / "jobs" / done_job / "work" / "final").is_dir()  # fetched from the volume

        wait_for(lambda: "sft.remote.reattached" in [e["type"] for e in events(api, cancel_job)], timeout=60,
                 what="the second job reattached")
        assert _alive(int(call_ids[cancel_job]))
        cancelled = api.post(f"/learning/jobs/{cancel_job}/cancel").json()
        assert cancelled["status"] == "cancelled", (cancelled, events(api, cancel_job)[-3:])
        wait_for(lambda: not _alive(int(call_ids[cancel_job])), timeout=60, what="the remote call to stop")
        assert os.path.isdir(volume / cancel_job)

        # the fine-tune just fetched from the volume is the base of the next Modal job: its weights (only on this
        # backend's disk) go up with the job, and the remote trainer starts from them
        tuned = row["fine_tuned_model"]
        body = {**sft_body(file_id, steps=2, per_device_batch=2, model=tuned), "metadata": compute}
        created = api.post("/learning/jobs", json=body)
        assert created.status_code == 201, created.text
        next_job = created.json()["id"]
        assert api.post(f"/learning/jobs/{next_job}/start").status_code == 200
        row = wait_for(lambda: finished(next_job), timeout=240, interval=0.3, what="the job on the fine-tune")
        assert row["status"] == "succeeded", (row, events(api, next_job)[-4:], second.log())
        assert row["fine_tuned_model"] == f"ft:{TINY_TEXT}:{next_job}"  # named by the root base, as locally
        staged = volume / next_job / "models" / "staged" / done_job
        assert (staged / "model.safetensors").is_file()  # uploaded, not found on the volume by chance
        started = [e for e in events(api, next_job) if e["type"] == "sft.training.started"][0]
        assert started["data"]["model"] == tuned
        first = {p["step"]: p["value"] for p in metric_seen(done_job)}
        again = {p["step"]: p["value"] for p in metric_seen(next_job)}
        assert again[0] < first[0] - 0.1  # it starts from the trained weights, not from the base
        assert row["fine_tuned_model"] in [m["id"] for m in api.get("/learning/models").json()["data"]]
    finally:
        second.stop()
        _kill_remote_runs(data)  # a remote run this test left behind (only when it failed)
