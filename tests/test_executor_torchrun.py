"""The torchrun executor on CPU: the same SFT job worker over 2 gloo processes trains the tiny model to the same
loss curve as one process (the trainer run here) with the same global batch, with every rank holding the whole
model and with the model sharded by FSDP (whose fine-tune then answers at the inference endpoint); a job nothing
here can run is refused at create time; two "nodes" on this machine train one job with one claim."""

from __future__ import annotations

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
    worker_pids,
)

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

STEPS = 3


def _backend(root, tiny_text_models, name: str, **env: str) -> BackendProcess:
    data = root / name
    link_tiny(data, tiny_text_models)
    no_modal = {"MODAL_CONFIG_PATH": str(root / "no-modal.toml"), "MODAL_TOKEN_ID": "", "MODAL_TOKEN_SECRET": ""}
    return BackendProcess(data, env={"SYNTH_AI_BACKEND_WARM_WORKER": "0", "SYNTH_AI_BACKEND_GPUS": "0",
                                     **no_modal, **env}).start()


def _hyper(**more) -> dict:
    return {**sft_body("unused", steps=STEPS, per_device_batch=1, learning_rate=5e-3)["hyperparameters"], **more}


def _submit(backend: BackendProcess, path, **hyper) -> tuple[object, str]:
    api = backend.client()
    file_id = upload(api, path).json()["id"]
    body = {**sft_body(file_id), "hyperparameters": _hyper(**hyper)}
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


def _one_process_loss(tmp_path, store_root, path, **hyper) -> dict[int, float]:
    """The SFT trainer in this process, as the local executor's worker runs it."""
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.sft.trainer import run_sft

    loss: dict[int, float] = {}

    class Reporter:
        def event(self, *args, **kwargs) -> None:
            pass

        def metric(self, name: str, step: int, value: float, phase: str = "train") -> None:
            if name == "train.loss":
                loss[step] = value

    store = ModelStore(store_root)
    spec = {"model": TINY_TEXT, "job_id": "one", "training_file_path": str(path), "hyperparameters": _hyper(**hyper),
            "metadata": {"effective_config": {}}}
    run_sft(spec, workdir=tmp_path / "one", model_store=store, reporter=Reporter(), should_stop=lambda: False)
    return loss


def _loss(api, job_id: str) -> dict[int, float]:
    points = api.get(f"/learning/jobs/{job_id}/metrics", params={"name": "train.loss"}).json()["points"]
    return {p["step"]: p["value"] for p in points}


def test_two_gloo_processes_match_one_process_and_big_jobs_are_refused(tmp_path, tiny_text_models):
    data = chat_jsonl(tmp_path / "chat.jsonl", n=12)
    pair = _backend(tmp_path, tiny_text_models, "pair", SYNTH_AI_BACKEND_EXECUTOR="torchrun",
                    SYNTH_AI_BACKEND_TORCHRUN_NPROC="2", SYNTH_AI_BACKEND_MAX_JOBS="3")
    try:
        # 2 ranks, 1 micro-batch each == one process, 2 micro-batches a step (same global batch, same order)
        api2, job2 = _submit(pair, data, gradient_accumulation_steps=1)
        _, long_job = _submit(pair, data, gradient_accumulation_steps=1, total_steps=100000)  # to cancel, below
        _, sharded = _submit(pair, data, gradient_accumulation_steps=1, parallelism={"fsdp": True})
        one = _one_process_loss(tmp_path, tiny_text_models[0].parents[2], data, gradient_accumulation_steps=2)  # meanwhile, here
        row2 = _finished(api2, job2, pair)
        assert row2["fine_tuned_model"] == f"ft:{TINY_TEXT}:{job2}"  # same model ids whichever executor ran it
        started = [e for e in events(api2, job2) if e["type"] == "sft.training.started"]
        assert len(started) == 1 and started[0]["data"]["world_size"] == 2  # only rank 0 reports
        two = _loss(api2, job2)
        assert sorted(one) == sorted(two) == list(range(STEPS))
        for step in one:
            assert two[step] == pytest.approx(one[step], rel=1e-4, abs=1e-5), (one, two)
        assert one[STEPS - 1] != one[0]  # the weights moved: a curve, not a constant
        # the pair's fine-tune is usable like any other: registered and listed
        models = [m["id"] for m in api2.get("/learning/models").json()["data"]]
        assert row2["fine_tuned_model"] in models

        # FSDP: each rank holds half of every layer, and still computes the one-process update
        row3 = _finished(api2, sharded, pair)
        started = [e for e in events(api2, sharded) if e["type"] == "sft.training.started"]
        assert started[0]["data"]["fsdp"] == "full_shard" and started[0]["data"]["world_size"] == 2
        three = _loss(api2, sharded)
        assert sorted(three) == list(range(STEPS))
        for step in one:
            assert three[step] == pytest.approx(one[step], rel=1e-4, abs=1e-5), (one, three)
        assert [e for e in events(api2, sharded) if e["type"] == "sft.checkpoint.saved"]  # gathered on rank 0
        answer = api2.post("/inference/v1/chat/completions", json={  # the saved model is a whole model
            "model": row3["fine_tuned_model"], "messages": [{"role": "user", "content": "What is 2 plus 2?"}],
            "max_tokens": 4, "temperature": 0})
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] >= 1

        # a cancel stops every rank at the same step; the job ends cancelled and no rank is left behind
        wait_for(lambda: _loss(api2, long_job), timeout=240, interval=0.3, what="the long job's first step")
        cancelled = api2.post(f"/learning/jobs/{long_job}/cancel").json()
        assert cancelled["status"] == "cancelled", (cancelled, events(api2, long_job)[-3:], pair.log())
        assert [e for e in events(api2, long_job) if e["type"] == "sft.training.stopped"]
        wait_for(lambda: not worker_pids(long_job), timeout=60, what="the ranks to exit")

        # Qwen3-32B on 4 x H100 asked of a CPU-only backend without a Modal token: refused now, saying what runs it
        file_id = upload(api2, data).json()["id"]
        body = sft_body(file_id, model="Qwen/Qwen3-32B")
        body["metadata"] = {"effective_config": {"compute": {"gpu_type": "H100", "gpu_count": 4, "nodes": 1}}}
        refused = api2.post("/learning/jobs", json=body)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "no_executor" and "Qwen/Qwen3-32B" in error["message"]
        assert "modal token set" in error["hint"] and error["details"]["local_gpus"] == 0
    finally:
        pair.stop()


def test_two_nodes_on_this_machine_train_one_job_with_one_claim(tmp_path, tiny_text_models):
    """Your own cluster, as two "nodes" on 127.0.0.1 sharing one data dir: node 0 is the backend (torchrun executor,
    `--nnodes 2 --node-rank 0`), node 1 is `backend serve --node-rank 1`, which serves nothing and joins the job's
    launch; torchrun's rendezvous puts one CPU rank on each, and global rank 0 alone claims and reports."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from synth_ai.ports import any_free_port

    port = str(any_free_port())
    shared = tmp_path / "shared"
    shared.mkdir()
    env = {**os.environ, "SYNTH_AI_HOME": str(shared), "SYNTH_AI_BACKEND_TORCHRUN_NPROC": "1",
           "SYNTH_AI_BACKEND_GPUS": "0", "OMP_NUM_THREADS": "1"}
    # node 1 first, as SLURM may start it: node 0 has not made the database yet
    node1 = subprocess.Popen([sys.executable, "-m", "synth_ai", "backend", "serve", "--executor", "torchrun",
                              "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", port],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    node0 = None
    try:
        assert "node 1 of 2" in node1.stdout.readline()  # it reads the data dir from now on
        node0 = _backend(tmp_path, tiny_text_models, "shared", SYNTH_AI_BACKEND_EXECUTOR="torchrun",
                         SYNTH_AI_BACKEND_TORCHRUN_NPROC="1", SYNTH_AI_BACKEND_TORCHRUN_NNODES="2",
                         SYNTH_AI_BACKEND_TORCHRUN_NODE_RANK="0", SYNTH_AI_BACKEND_TORCHRUN_MASTER_ADDR="127.0.0.1",
                         SYNTH_AI_BACKEND_TORCHRUN_MASTER_PORT=port)
        api, job_id = _submit(node0, chat_jsonl(tmp_path / "chat.jsonl", n=8), gradient_accumulation_steps=1)
        row = _finished(api, job_id, node0)
        assert row["fine_tuned_model"] == f"ft:{TINY_TEXT}:{job_id}"
        assert node1.poll() is None  # still serving, for the next job
        log = events(api, job_id)
        assert [e["type"] for e in log].count("sft.job.running") == 1  # one job, two ranks, one claim
        started = [e for e in log if e["type"] == "sft.training.started"]
        assert len(started) == 1 and started[0]["data"]["world_size"] == 2, started
        assert sorted(_loss(api, job_id)) == list(range(STEPS))
        job_dir = node0.data_dir / "backend" / "jobs" / job_id
        assert (job_dir / "worker-node1.log").is_file()  # node 1 started the job's ranks there
        launch = json.loads((job_dir / "nodes.json").read_text())
        assert launch == {"attempt": 1, "nodes": 2, "master_addr": "127.0.0.1", "master_port": int(port)}
    finally:
        node1.send_signal(signal.SIGTERM)
        output = node1.communicate(timeout=60)[0]
        if node0 is not None:
            node0.stop()
    assert node1.returncode == 0, output
