"""From real task-app traces to training: the math and crafter apps serve rollouts with tracing on (real uvicorn
servers, a scripted chat-completions server as the policy), `synth-ai filter` turns the trace database into SFT
JSONL, `synth-ai files validate` accepts it, and the embedded backend trains on it."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from filter_support import filter_config, read_jsonl
from taskapp_support import ENV_KEY, completion, headers, math_entry, rollout_body, running_app, scripted_model, \
    tool_call

from backend_support import TINY_TEXT, TINY_VL, serve_backend
from conftest import REPO_ROOT, run_cli
from synth_ai.bundled_apps import APPS_DIR

CRAFTER_DIR = APPS_DIR / "crafter"


def _math_module():
    entry = math_entry()
    return entry, sys.modules[entry.config_factory.__module__]


def _math_traces(db: Path, seeds: range, monkeypatch: pytest.MonkeyPatch) -> dict[int, str]:
    """Rollouts of the math app (train split) written to `db`; the model is right on even seeds only.
    Returns each seed's problem text."""
    from synth_ai.taskapp import create_task_app
    from synth_ai.taskapp.tracing import TracingSettings

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    entry, module = _math_module()
    rows = {seed: module.pick("train", seed)[1] for seed in seeds}

    def policy(body):
        problem = body["messages"][-1]["content"]
        seed = next(s for s, row in rows.items() if row["problem"] == problem)
        answer = module.expected_answer(rows[seed]) if seed % 2 == 0 else "-12345"
        return completion(content=f"The answer is \\boxed{{{answer}}}.")

    app = create_task_app(entry.config_factory(), tracing=TracingSettings(enabled=True, db_path=db))
    with running_app(app) as base, scripted_model(policy) as (model_url, _):
        for seed in seeds:
            body = rollout_body(model_url, seed=seed, split="train", tool_choice=None)
            response = httpx.post(f"{base}/rollout", json=body, headers=headers(), timeout=60)
            assert response.status_code == 200, response.text
    return {seed: row["problem"] for seed, row in rows.items()}


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    yield from serve_backend(tmp_path_factory, "backend", tiny=(TINY_TEXT, TINY_VL),
                             env={"ENVIRONMENT_API_KEY": ENV_KEY})


def test_math_traces_filtered_to_correct_answers_train_an_sft_job(tmp_path, monkeypatch, backend):
    db = tmp_path / "traces" / "synth_ai.db"
    problems = _math_traces(db, range(8), monkeypatch)
    out = tmp_path / "ft_data" / "math_correct.jsonl"
    config = filter_config(tmp_path / "filter.toml", db, out, splits=["train"], min_official_score=1.0)
    result = run_cli("--json", "filter", "--config", str(config))
    assert result.exit_code == 0, result.stdout + result.stderr
    doc = result.json()
    assert doc["sessions"]["read"] == 8 and doc["sessions"]["kept"] == 4
    assert doc["sessions"]["dropped"]["official_score"] == 4
    records = read_jsonl(out)
    assert sorted(r["metadata"]["seed"] for r in records) == [0, 2, 4, 6]
    for record in records:
        user, assistant = record["messages"]
        assert user == {"role": "user", "content": problems[record["metadata"]["seed"]]}
        assert assistant["content"].startswith("The answer is \\boxed{") and "-12345" not in assistant["content"]
        assert record["metadata"]["total_reward"] == 1 and record["metadata"]["model"] == "scripted-model"

    validated = run_cli("files", "validate", str(out))
    assert validated.exit_code == 0, validated.stdout
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    trained = run_cli("train", "--config", str(REPO_ROOT / "examples" / "configs" / "sft_tiny_local.toml"),
                      "--dataset", str(out), "--backend", backend.url, "--poll-interval", "0.2")
    assert trained.exit_code == 0, trained.stdout + trained.stderr
    assert "Final status: succeeded" in trained.stdout


def test_crafter_vision_traces_become_multimodal_records_for_qwen3_vl(tmp_path, monkeypatch, backend):
    pytest.importorskip("crafter")
    from synth_ai.taskapp.discovery import AppChoice, load_task_app
    from synth_ai.taskapp.server import create_task_app
    from synth_ai.taskapp.tracing import TracingSettings

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    db = tmp_path / "crafter.db"
    entry = load_task_app(AppChoice("grpo-crafter-task-app", CRAFTER_DIR / "task_app.py"))
    app = create_task_app(entry.config_factory(), tracing=TracingSettings(enabled=True, db_path=db))
    reply = completion(None, [tool_call("interact_many", {"actions": ["move_left", "do"]})], model="scripted")
    with running_app(app) as base, scripted_model(lambda body: reply) as (model_url, _):
        for seed in (3, 4):
            body = {"run_id": f"run-{seed}", "env": {"seed": seed, "config": {"area": [16, 16], "length": 50}},
                    "policy": {"policy_name": "crafter-react", "config": {
                        "model": "scripted", "inference_url": model_url, "max_turns": 2, "use_vision": True}},
                    "ops": [], "mode": "eval"}
            response = httpx.post(f"{base}/rollout", json=body, headers=headers(), timeout=120)
            assert response.status_code == 200, response.text
    out = tmp_path / "crafter_vision.jsonl"
    result = run_cli("--json", "filter", "--config", str(filter_config(tmp_path / "f.toml", db, out)))
    assert result.exit_code == 0, result.stdout + result.stderr
    records = read_jsonl(out)
    assert len(records) == 4  # two sessions, two turns each
    for record in records:
        user, assistant = record["messages"]
        assert [p["type"] for p in user["content"]] == ["text", "image_url"]
        assert user["content"][0]["text"].startswith("=== CRAFTER GAME STATE ===")
        assert user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
        assert assistant["tool_calls"][0]["function"]["name"] == "interact_many"
    assert records[0]["messages"][0]["content"] != records[1]["messages"][0]["content"]  # each turn's own frame

    validated = run_cli("files", "validate", str(out), "--model", TINY_VL)
    assert validated.exit_code == 0, validated.stdout
    assert "4 images" in validated.stdout
    config = tmp_path / "sft_vl.toml"
    config.write_text(
        '[algorithm]\ntype = "offline"\nmethod = "sft"\nvariety = "fft"\n\n'
        f'[job]\nmodel = "{TINY_VL}"\n\n[training]\nmode = "full_finetune"\n\n'
        "[hyperparameters]\nn_epochs = 1\nper_device_batch = 2\nsequence_length = 512\nlearning_rate = 1e-3\n")
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    trained = run_cli("train", "--config", str(config), "--dataset", str(out), "--backend", backend.url,
                      "--poll-interval", "0.2")
    assert trained.exit_code == 0, trained.stdout + trained.stderr
    assert "Final status: succeeded" in trained.stdout
