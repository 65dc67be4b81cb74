"""A real SFT job on a real backend (tiny Qwen3, CPU) reporting live to TensorBoard and an offline W&B run, read
back with their own readers; a job whose tracker cannot start still succeeds with one warning event; and
`synth-ai jobs log --to tensorboard` replays the job from the API."""

from __future__ import annotations

import pytest
from backend_support import BackendProcess, chat_jsonl, events, job_status, link_tiny, sft_body, upload, wait_for
from tracking_support import series, tensorboard_scalars, tensorboard_texts, wandb_run

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

FAKE_KEY = "wandb-fake-key-0123456789abcdef"


def test_sft_job_reports_live_and_replays(tmp_path, tiny_text_models, cli, monkeypatch):
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    blocker = tmp_path / "a-file"
    blocker.write_text("x\n")
    backend = BackendProcess(data, env={"WANDB_MODE": "offline", "WANDB_API_KEY": FAKE_KEY,
                                        "SYNTH_AI_BACKEND_MAX_JOBS": "2"}).start()
    try:
        with backend.client() as api:
            file_id = upload(api, chat_jsonl(tmp_path / "train.jsonl", n=8)).json()["id"]
            ids = {}
            for name, logging in (("good", {"report_to": ["tensorboard", "wandb"], "tags": ["e2e"]}),
                                  ("bad", {"report_to": ["tensorboard"], "tensorboard_dir": str(blocker / "tb")})):
                body = sft_body(file_id, steps=4)
                body["metadata"] = {"effective_config": {"logging": logging}}
                job = api.post("/learning/jobs", json=body).json()
                assert api.post(f"/learning/jobs/{job['id']}/start", json={}).status_code == 200
                ids[name] = job["id"]
            for job_id in ids.values():
                wait_for(lambda j=job_id: job_status(api, j) in {"succeeded", "failed", "cancelled"}, timeout=240,
                         interval=0.5, what="the jobs to finish")
            good, bad = ids["good"], ids["bad"]
            assert job_status(api, good) == "succeeded" and job_status(api, bad) == "succeeded", backend.log()
            fine_tuned = api.get(f"/learning/jobs/{good}").json()["fine_tuned_model"]
            good_events, bad_events = events(api, good), events(api, bad)
    finally:
        backend.stop()

    assert [e for e in good_events if "tracking.warning" in e["type"]] == []
    assert any(e["type"] == "sft.tracking.started" for e in good_events)
    warnings = [e for e in bad_events if e["type"] == "sft.tracking.warning"]
    assert len(warnings) == 1 and warnings[0]["data"]["tracker"] == "tensorboard", warnings
    assert "tensorboard_dir" in warnings[0]["message"]
    for event in good_events + bad_events:
        assert FAKE_KEY not in str(event)

    folder = data / "tracking" / "tensorboard" / good
    scalars = tensorboard_scalars(folder)
    assert sorted(scalars["train.loss"]) == [0, 1, 2, 3]
    assert {"learning_rate", "grad_norm", "tokens_per_second"} <= set(scalars)
    assert fine_tuned in tensorboard_texts(folder)["summary"][0]
    run = wandb_run(data / "tracking")
    assert run["name"] == good and "e2e" in run["tags"] and fine_tuned in run["tags"]
    assert series(run["history"], "train.loss") == pytest.approx(scalars["train.loss"], rel=1e-5)
    assert run["summary"]["fine_tuned_model"] == fine_tuned
    assert FAKE_KEY.encode() not in run["file"].read_bytes()

    backend = BackendProcess(data, port=backend.port).start()
    try:
        replay = tmp_path / "replay"
        monkeypatch.setenv("SYNTH_API_KEY", backend.key)
        monkeypatch.setenv("SYNTH_AI_HOME", str(tmp_path / "cli-home"))
        result = cli("jobs", "log", good, "--to", "tensorboard", "--dir", str(replay), "--backend", backend.url,
                     "--json")
        assert result.exit_code == 0, (result.stdout, result.stderr)
        assert tensorboard_scalars(replay)["train.loss"] == scalars["train.loss"]
    finally:
        backend.stop()
