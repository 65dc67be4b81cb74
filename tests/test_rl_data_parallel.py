"""Data-parallel GSPO under the torchrun executor, on CPU with gloo: a real RL job through the backend over 2 ranks
(each with its own policy server; an uneven share of 3 groups) samples the same rollouts, reports the same
per-iteration rewards and losses and ends with the same weights as one process running the trainer here; its
`rl:` model answers at the inference endpoint.

Identical rollouts in both runs: sampling is seeded per rollout id and call (policy_server), so a rollout samples
the same tokens whichever rank runs it, given bit-identical weights and batch. The update of N ranks equals one
process's only up to float rounding (gradients summed in another order), and on the tiny model's flat
distributions a 1e-9 weight difference tips a sampled token now and then; so the policy servers keep the starting
weights (weight_sync_interval beyond the run: iterations 1-2 train off-policy, GSPO's ratio and clip at work) and
run one rollout at a time (every call in a batch of its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend_support import TINY_TEXT, link_tiny, wait_for, worker_pids
from rl_support import Recorder, quiz_app, rl_body, run_in_process, saved_weights, torchrun_backend
from taskapp_support import running_app

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

ENV_KEY = "sk_env_rl_dp_0123456789abcdef"
ITERATIONS = 3
TRAINING = {"iterations_per_epoch": ITERATIONS, "batch_size": 3, "group_size": 4, "checkpoint_interval": 2,
            "weight_sync_interval": 100, "tables": {"rollout": {"max_concurrent_rollouts": 1}}}


def _events(api, job_id: str) -> list[dict]:
    return api.get(f"/rl/jobs/{job_id}/events", params={"since_seq": 0, "limit": 1000}).json()["events"]


def _series(api, job_id: str, name: str) -> list[float]:
    points = api.get(f"/rl/jobs/{job_id}/metrics", params={"name": name, "limit": 100}).json()["points"]
    return [p["value"] for p in sorted(points, key=lambda p: p["step"])]


def finished_job(api, job_id: str) -> dict | None:
    row = api.get(f"/rl/jobs/{job_id}").json()
    return row if row["status"] in ("succeeded", "failed", "cancelled") else None


def test_two_gloo_ranks_train_the_same_policy_as_one_process(tmp_path: Path, tiny_text_models: list[Path],
                                                             monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    backend = torchrun_backend(data, tmp_path, ENV_KEY)
    try:
        with running_app(quiz_app()) as app, backend.client() as api:
            created = api.post("/rl/jobs", json=rl_body(app, **TRAINING))
            assert created.status_code in (200, 201), created.text
            job_id = created.json()["id"]
            one = Recorder()  # meanwhile, the same job in this process (the local executor's path)
            run_in_process(tmp_path / "one", tiny_text_models, app, one, **TRAINING)

            job = wait_for(lambda: finished_job(api, job_id), timeout=300, interval=0.5, what="the 2-rank RL job")
            log = _events(api, job_id)
            assert job["status"] == "succeeded", (job, log[-4:], backend.log()[-3000:])
            assert job["fine_tuned_model"] == f"rl:{TINY_TEXT}:{job_id}"

            # rank 0 alone reports: one start (saying 2 ranks), one step event and one point per iteration
            started = [e for e in log if e["type"] == "rl.train.started"]
            assert len(started) == 1 and started[0]["data"]["world_size"] == 2
            assert started[0]["data"]["devices"] == {"trainer": "cpu", "rollout": ["cpu"], "colocated": True}
            assert started[0]["data"]["rollout_device"] == "cpu"
            assert len([e for e in log if e["type"] == "rl.train.step"]) == ITERATIONS
            assert len([e for e in log if e["type"] == "rl.checkpoint.saved"]) == 1

            # the same rollouts (rewards over all 12 of them, none failed) and the same updates as one process
            for name in ("reward.mean", "reward.std", "response_tokens.mean", "rollouts.errors"):
                assert _series(api, job_id, name) == one.series(name), name
            assert _series(api, job_id, "rollouts.errors") == [0.0] * ITERATIONS
            for name in ("loss", "kl", "clip_fraction"):
                assert _series(api, job_id, name) == pytest.approx(one.series(name), rel=1e-4, abs=1e-6), name
            steps = [e["data"] for e in log if e["type"] == "rl.train.step"]
            assert [s["rollouts"] for s in steps] == [12] * ITERATIONS
            assert [s["samples"] for s in steps] == [s["data"]["samples"] for s in one.of("rl.train.step")]

            # the same final weights, moved from the base
            two = saved_weights(next(data.rglob(f"{job_id}/work/final")))
            alone = saved_weights(tmp_path / "one" / "work" / "final")
            base = saved_weights(tiny_text_models[0])
            assert two.keys() == alone.keys()
            assert max(float((two[k] - alone[k]).abs().max()) for k in two) < 1e-5
            assert max(float((alone[k] - base[k]).abs().max()) for k in alone if k in base) > 1e-4

            # the rl: model is served like any other
            answer = api.post("/inference/v1/chat/completions", json={
                "model": job["fine_tuned_model"], "messages": [{"role": "user", "content": "Name a color."}],
                "max_tokens": 6, "temperature": 0})
            assert answer.status_code == 200, answer.text
            assert answer.json()["usage"]["completion_tokens"] >= 1

            # a cancel stops both ranks at the same iteration; the job ends cancelled, no rank left behind
            long_job = api.post("/rl/jobs", json=rl_body(app, iterations_per_epoch=500)).json()["id"]
            wait_for(lambda: any(e["type"] == "rl.train.step" for e in _events(api, long_job)), timeout=180,
                     what="the long job's first iteration")
            assert api.post(f"/rl/jobs/{long_job}/cancel").status_code == 200
            wait_for(lambda: finished_job(api, long_job), timeout=60, what="the cancel")
            log = _events(api, long_job)
            assert api.get(f"/rl/jobs/{long_job}").json()["status"] == "cancelled", (log[-4:], backend.log()[-3000:])
            assert len([e for e in log if e["type"] == "rl.train.stopped"]) == 1
            wait_for(lambda: not worker_pids(long_job), timeout=60, what="the ranks to exit")
    finally:
        backend.stop()
