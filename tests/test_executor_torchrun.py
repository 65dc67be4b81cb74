"""The torchrun executor on CPU: the same SFT job worker over 2 gloo processes trains the tiny model to the same
loss curve as one process with the same global batch; a job nothing here can run is refused at create time."""

from __future__ import annotations

import pytest

from backend_support import (
    TINY_TEXT,
    BackendProcess,
    build_tiny_models,
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

STEPS = 3


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> list:
    return build_tiny_models(tmp_path_factory.getbasetemp() / "ml-core-data", (TINY_TEXT,))


def _backend(root, tiny_models, name: str, **env: str) -> BackendProcess:
    data = root / name
    link_tiny(data, tiny_models)
    no_modal = {"MODAL_CONFIG_PATH": str(root / "no-modal.toml"), "MODAL_TOKEN_ID": "", "MODAL_TOKEN_SECRET": ""}
    return BackendProcess(data, env={"SYNTH_AI_BACKEND_WARM_WORKER": "0", "SYNTH_AI_BACKEND_GPUS": "0",
                                     **no_modal, **env}).start()


def _submit(backend: BackendProcess, path, **hyper) -> tuple[object, str]:
    api = backend.client()
    file_id = upload(api, path).json()["id"]
    body = sft_body(file_id, steps=STEPS, per_device_batch=1, learning_rate=5e-3, **hyper)
    job = api.post("/learning/jobs", json=body)
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    assert api.post(f"/learning/jobs/{job_id}/start").status_code == 200
    return api, job_id


def _finished(api, job_id: str, backend: BackendProcess) -> dict:
    def done():
        row = api.get(f"/learning/jobs/{job_id}").json()
        return row if row["status"] in {"succeeded", "failed", "cancelled"} else None

    row = wait_for(done, timeout=300, interval=0.5, what=f"job {job_id}")
    assert row["status"] == "succeeded", (row, events(api, job_id)[-3:], backend.log())
    return row


def _loss(api, job_id: str) -> dict[int, float]:
    points = api.get(f"/learning/jobs/{job_id}/metrics", params={"name": "train.loss"}).json()["points"]
    return {p["step"]: p["value"] for p in points}


def test_two_gloo_processes_match_one_process_and_big_jobs_are_refused(tmp_path, tiny_models):
    data = chat_jsonl(tmp_path / "chat.jsonl", n=12)
    single = _backend(tmp_path, tiny_models, "single")
    pair = _backend(tmp_path, tiny_models, "pair", SYNTH_AI_BACKEND_EXECUTOR="torchrun",
                    SYNTH_AI_BACKEND_TORCHRUN_NPROC="2")
    try:
        # one process, 2 micro-batches a step == 2 ranks, 1 micro-batch each (same global batch, same order)
        api1, job1 = _submit(single, data, gradient_accumulation_steps=2)
        api2, job2 = _submit(pair, data, gradient_accumulation_steps=1)
        row1, row2 = _finished(api1, job1, single), _finished(api2, job2, pair)
        assert row2["fine_tuned_model"] == f"ft:{TINY_TEXT}:{job2}"  # same model ids whichever executor ran it
        started = [e for e in events(api2, job2) if e["type"] == "sft.training.started"]
        assert len(started) == 1 and started[0]["data"]["world_size"] == 2  # only rank 0 reports
        assert [e for e in events(api1, job1) if e["type"] == "sft.training.started"][0]["data"]["world_size"] == 1
        one, two = _loss(api1, job1), _loss(api2, job2)
        assert sorted(one) == sorted(two) == list(range(STEPS))
        for step in one:
            assert two[step] == pytest.approx(one[step], rel=1e-4, abs=1e-5), (one, two)
        assert one[STEPS - 1] != one[0]  # the weights moved: a curve, not a constant
        # the pair's fine-tune is usable like any other: registered and listed
        models = [m["id"] for m in api2.get("/learning/models").json()["data"]]
        assert row2["fine_tuned_model"] in models

        # Qwen3-32B on 4 x H100 asked of a CPU-only backend without a Modal token: refused now, saying what runs it
        file_id = upload(api1, data).json()["id"]
        body = sft_body(file_id, model="Qwen/Qwen3-32B")
        body["metadata"] = {"effective_config": {"compute": {"gpu_type": "H100", "gpu_count": 4, "nodes": 1}}}
        refused = api1.post("/learning/jobs", json=body)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "no_executor" and "Qwen/Qwen3-32B" in error["message"]
        assert "modal token set" in error["hint"] and error["details"]["local_gpus"] == 0
    finally:
        single.stop()
        pair.stop()
