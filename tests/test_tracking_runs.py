"""Experiment tracking on real runs, read back with each tracker's own reader, offline: a 2-iteration RL job on a
real backend (tiny Qwen3, the color-quiz app over HTTP) reporting live to TensorBoard, with its per-iteration
rollout tables bounded by `sample_rows`; the same job replayed from the API by `synth-ai jobs log --to mlflow`
(a sqlite store) and `--to wandb` (an offline run); a `synth-ai eval` with a `[logging]` table logging its
per-seed scores."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from backend_support import BackendProcess, link_tiny, wait_for
from eval_support import answering_policy, write_config
from rl_support import quiz_app, rl_body
from taskapp_support import ENV_KEY, running_app, scripted_model
from tracking_support import series, tensorboard_scalars, tensorboard_texts, wandb_run

from synth_ai.tracking.tables import as_markdown, as_records, table_from_event

pytestmark = pytest.mark.slow
SAMPLE_ROWS = 3  # of the 8 rollouts (2 seeds x 4) each iteration samples
ROLLOUT_COLUMNS = {"prompt", "completion", "reward", "seed"}


def _finished_rl_job(api: Any, app: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    logging = {"report_to": ["tensorboard"], "sample_rows": SAMPLE_ROWS, "tags": ["rl-e2e"]}
    created = api.post("/rl/jobs", json=rl_body(app, iterations_per_epoch=2, tables={"logging": logging}))
    assert created.status_code in (200, 201), created.text
    job_id = created.json()["id"]
    job = wait_for(lambda: (row := api.get(f"/rl/jobs/{job_id}").json())["status"] in (
        "succeeded", "failed", "cancelled") and row, timeout=300, interval=0.5, what="the RL job")
    events = api.get(f"/rl/jobs/{job_id}/events", params={"since_seq": 0, "limit": 1000}).json()["events"]
    assert job["status"] == "succeeded", (job, events[-4:])
    return job, events


def _wandb_table(run: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The rows of each W&B Table logged under `name`, from the table files the offline run wrote beside it."""
    paths = [row[f"{name}/path"] for row in run["history"] if f"{name}/path" in row]
    tables = [json.loads((run["file"].parent / "files" / path).read_text()) for path in paths]
    return [[dict(zip(t["columns"], r, strict=True)) for r in t["data"]] for t in tables]


def test_rl_job_reports_live_with_rollout_tables_then_replays_to_mlflow_and_wandb(tmp_path: Path,
                                                                                 tiny_text_models: list[Path],
                                                                                 cli, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    backend = BackendProcess(data, env={"ENVIRONMENT_API_KEY": ENV_KEY}).start()
    try:
        with running_app(quiz_app()) as app, backend.client() as api:
            job, events = _finished_rl_job(api, app)
        job_id, fine_tuned = job["id"], job["fine_tuned_model"]

        # live: the reward curve and one rollout table per iteration, each bounded by sample_rows
        assert [e for e in events if "tracking.warning" in e["type"]] == []
        folder = data / "tracking" / "tensorboard" / job_id
        scalars = tensorboard_scalars(folder)
        assert sorted(scalars["reward.mean"]) == [0, 1]
        assert {"loss", "kl", "clip_fraction"} <= set(scalars), scalars.keys()
        sampled = [table_from_event(e["data"]) for e in events if e["type"] == "rl.rollouts.samples"]
        assert [t.step for t in sampled] == [0, 1]
        for table in sampled:
            assert ROLLOUT_COLUMNS <= set(table.columns) and len(table.rows) == SAMPLE_ROWS
            records = as_records(table)
            assert all(r["prompt"] and 0.0 <= r["reward"] <= 1.0 and r["seed"] in (0, 1, 2, 3) for r in records)
            assert any(r["completion"] for r in records)
        assert tensorboard_texts(folder)["samples/rollouts"] == [as_markdown(t) for t in sampled]
        assert fine_tuned in tensorboard_texts(folder)["summary"][0]

        # backfill from the API: MLflow (sqlite store) and W&B (offline), each a new run of the same points
        monkeypatch.setenv("SYNTH_API_KEY", backend.key)
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        monkeypatch.setenv("MLFLOW_ARTIFACTS_DESTINATION", (tmp_path / "artifacts").as_uri())
        monkeypatch.setenv("WANDB_MODE", "offline")
        monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
        for to in ("mlflow", "wandb"):
            result = cli("--json", "jobs", "log", job_id, "--to", to, "--project", "replays",
                         "--backend", backend.url)
            assert result.exit_code == 0, (result.stdout, result.stderr)
            assert result.json()["tables"] == 2 and result.json()["status"] == "succeeded"
    finally:
        backend.stop()

    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("replays").experiment_id])
    assert run.info.run_name == job_id and run.info.status == "FINISHED"
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "reward.mean")}
    assert history == pytest.approx(scalars["reward.mean"], rel=1e-6)
    assert run.data.tags["fine_tuned_model"] == fine_tuned and "rl-e2e" in run.data.tags
    assert run.data.params["training.iterations_per_epoch"] == "2"
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "samples/rollouts")]
    assert artifacts == ["samples/rollouts/step_000000.json", "samples/rollouts/step_000001.json"]
    for table, path in zip(sampled, artifacts, strict=True):
        local = Path(client.download_artifacts(run.info.run_id, path, str(tmp_path)))
        assert json.loads(local.read_text()) == json.loads(json.dumps(as_records(table)))

    wandb = wandb_run(tmp_path / "wandb")
    assert wandb["name"] == job_id and fine_tuned in wandb["tags"]
    assert series(wandb["history"], "reward.mean") == pytest.approx(scalars["reward.mean"], rel=1e-6)
    assert wandb["summary"]["fine_tuned_model"] == fine_tuned
    rows = _wandb_table(wandb, "samples/rollouts")
    assert [[r["seed"] for r in table] for table in rows] == [[r["seed"] for r in as_records(t)] for t in sampled]
    assert all(len(table) == SAMPLE_ROWS for table in rows)


def test_eval_with_a_logging_table_logs_per_seed_scores(cli, isolated_home: Path, monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.setenv("WANDB_MODE", "offline")
    with scripted_model(answering_policy(right={1})) as (model_url, _):
        config = write_config(isolated_home / "eval.toml", model_url, seeds=[0, 1])
        config.write_text(config.read_text() + '\n[logging]\nreport_to = ["tensorboard", "wandb"]\n'
                          'tensorboard_dir = "tb"\nrun_name = "math-eval"\n')
        result = cli("--json", "eval", "--config", str(config), "--concurrency", "1")
    assert result.exit_code == 0, result.stdout + result.stderr
    doc = result.json()
    assert [(r["seed"], r["official_score"]) for r in doc["results"]] == [(0, 0.0), (1, 1.0)]
    assert "warning" not in result.stderr and "Reporting to wandb, tensorboard" in result.stderr

    folder = isolated_home / "tb"
    assert tensorboard_scalars(folder)["eval.score"] == {0: 0.0, 1: 1.0}
    table = tensorboard_texts(folder)["samples/eval/seeds"][0]
    assert "| 0 | ok | 0.0 |" in table and "| 1 | ok | 1.0 |" in table
    run = wandb_run(Path(os.environ["SYNTH_AI_HOME"]) / "tracking")
    assert run["name"] == "math-eval" and series(run["history"], "eval.score") == {0: 0.0, 1: 1.0}
    assert run["summary"]["mean_score"] == 0.5
    (seeds,) = _wandb_table(run, "samples/eval/seeds")
    assert [(r["seed"], r["official_score"]) for r in seeds] == [(0, 0.0), (1, 1.0)]
