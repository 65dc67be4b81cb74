"""Experiment tracking, read back with each tracker's own reader, offline: the fan-out writing TensorBoard event
files, an offline W&B run and an MLflow file store; a failing tracker dropped with one warning while the others go
on; no secret in what is written; an eval's per-seed scores."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracking_support import series, tensorboard_scalars, tensorboard_texts, wandb_run

from synth_ai.tracking.settings import resolve_tracking
from synth_ai.tracking.tables import table_event_data
from synth_ai.tracking.tracker import Tracker

SECRET = "sk-live-tracking-secret-0123456789"
POINTS = [("reward.mean", 0, 0.25, "train"), ("kl", 0, 0.01, "train"), ("clip_fraction", 0, 0.1, "train"),
          ("reward.mean", 1, 0.5, "train"), ("staleness.mean", 1, 0.5, "train"), ("mismatch_kl", 1, 0.002, "train"),
          ("backlog.groups", 1, 3.0, "train"), ("eval.mean_return", 1, 0.75, "eval"), ("loss", 1, None, "train")]
CONFIG = {"model": "synth-ai/tiny-qwen3", "training": {"learning_rate": 1e-5},
          "judge": {"options": {"api_key": SECRET}}, "services": {"judge_url": f"https://me:{SECRET}@judge/x"}}


def _run(settings, warnings: list) -> Tracker:
    from synth_ai.tracking.public_config import public_config

    tracker = Tracker(settings, config=public_config(CONFIG), warn=lambda *w: warnings.append(w))
    tracker.points(POINTS[:3])
    tracker.points(POINTS[3:])
    tracker.event({"iteration": 1})  # not a table: ignored
    tracker.event(table_event_data("rollouts", 1, ["seed", "reward", "completion"],
                                   [[s, s / 10, f"answer {s}"] for s in range(5)]))
    tracker.close(status="succeeded", summary={"job_id": "rljob_x", "fine_tuned_model": "rl:tiny:rljob_x"},
                  tags=["rl:tiny:rljob_x"])
    return tracker


def _no_secret_under(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_tensorboard_and_wandb_offline_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    settings = resolve_tracking({"report_to": ["wandb", "tensorboard"], "project": "proj", "tags": ["t1"],
                                 "sample_rows": 3}, run_id="rljob_x", data_dir=tmp_path, environ={})
    warnings: list = []
    _run(settings, warnings)
    assert warnings == []

    assert settings.tensorboard_dir == tmp_path / "tracking" / "tensorboard" / "rljob_x"
    scalars = tensorboard_scalars(settings.tensorboard_dir)
    assert scalars["reward.mean"] == {0: 0.25, 1: 0.5}
    for name in ("staleness.mean", "mismatch_kl", "backlog.groups", "kl", "clip_fraction", "eval.mean_return"):
        assert name in scalars, scalars.keys()  # names come from the points, none from a fixed list
    assert "loss" not in scalars  # a None value is no point
    texts = tensorboard_texts(settings.tensorboard_dir)
    table = texts["samples/rollouts"][0]
    assert "answer 2" in table and "answer 3" not in table  # bounded by sample_rows
    assert "rl:tiny:rljob_x" in texts["summary"][0] and "learning_rate" in texts["config"][0]

    run = wandb_run(tmp_path / "tracking")
    assert run["name"] == "rljob_x" and "t1" in run["tags"] and "rl:tiny:rljob_x" in run["tags"]
    assert series(run["history"], "reward.mean") == {0: 0.25, 1: 0.5}
    assert series(run["history"], "staleness.mean") == {1: 0.5}
    assert any("samples/rollouts/_type" in row for row in run["history"])
    assert run["summary"]["fine_tuned_model"] == "rl:tiny:rljob_x" and run["summary"]["job_id"] == "rljob_x"
    assert run["config"]["training"]["learning_rate"] == 1e-5
    assert run["config"]["judge"]["options"]["api_key"] != SECRET
    _no_secret_under(tmp_path)


def test_mlflow_sqlite_store_read_back(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_ARTIFACTS_DESTINATION", (tmp_path / "artifacts").as_uri())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    settings = resolve_tracking({"report_to": ["mlflow"]}, run_id="rljob_x", data_dir=tmp_path,
                                environ={"MLFLOW_EXPERIMENT_NAME": "exp"})
    warnings: list = []
    _run(settings, warnings)
    assert warnings == []
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("exp")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "rljob_x" and run.info.status == "FINISHED"
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "reward.mean")] == [(0, 0.25),
                                                                                                    (1, 0.5)]
    assert client.get_metric_history(run.info.run_id, "mismatch_kl")[0].value == pytest.approx(0.002)
    assert run.data.params["training.learning_rate"] == "1e-05"
    assert SECRET not in run.data.params["judge.options.api_key"]
    assert run.data.tags["fine_tuned_model"] == "rl:tiny:rljob_x" and run.data.tags["job_id"] == "rljob_x"
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "samples/rollouts")]
    assert artifacts == ["samples/rollouts/step_000001.json"]
    _no_secret_under(tmp_path)


def test_a_failing_tracker_warns_once_and_the_others_go_on(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    settings = resolve_tracking({"report_to": ["tensorboard", "wandb"], "tensorboard_dir": str(blocker / "tb")},
                                run_id="job_y", data_dir=tmp_path, environ={})
    warnings: list = []
    tracker = _run(settings, warnings)
    assert len(warnings) == 1, warnings
    name, reason, fix = warnings[0]
    assert name == "tensorboard" and ("FileExistsError" in reason or "NotADirectoryError" in reason), reason
    assert "tensorboard_dir" in fix
    assert set(tracker.failed) == {"tensorboard"}
    assert series(wandb_run(tmp_path / "tracking")["history"], "reward.mean") == {0: 0.25, 1: 0.5}


def test_eval_logs_per_seed_scores(tmp_path, monkeypatch):
    from synth_ai.eval.runner import SeedResult
    from synth_ai.eval.tracking import start_eval_tracking

    monkeypatch.setenv("SYNTH_AI_HOME", str(tmp_path))
    said: list[str] = []
    tracking = start_eval_tracking({"logging": {"report_to": "tensorboard"}, "model": "m"}, run_id="eval_1",
                                   model="m", say=said.append)
    results = [SeedResult(seed=s, status="ok", elapsed_s=0.1, official_score=s / 4) for s in (3, 1, 2)]
    for result in results:
        tracking.seed_finished(result)
    tracking.close(results, {"eval_run_id": "eval_1", "model": "m"}, completed=True)
    folder = tmp_path / "tracking" / "tensorboard" / "eval_1"
    assert tensorboard_scalars(folder)["eval.score"] == {0: 0.75, 1: 0.25, 2: 0.5}
    texts = tensorboard_texts(folder)
    assert "| 3 | ok | 0.75 |" in texts["samples/eval/seeds"][0]
    assert "mean_score" in texts["summary"][0] and any("tensorboard" in line for line in said)
