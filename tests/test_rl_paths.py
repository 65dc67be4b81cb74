"""RL paths end to end that the other RL tests do not walk, on one real backend (`synth-ai backend serve`, SQLite)
with real task apps over HTTP (`synth-ai serve`):

- an SFT job with LoRA, then `synth-ai train --type rl --model ft:… --stream-format chart` with
  `trainer_mode = "lora"` (the `warming_up_to_rl/rl_from_ft.toml` flow): the chart shows reward as well as loss, the
  `rl:` model (adapters merged over the merged fine-tune) answers at the inference endpoint, and `synth-ai eval
  --model rl:…` against the task app writes traces;
- Crafter with the tiny Qwen3-VL (LoRA) as a backend RL job with `max_images_per_step = 1`: it succeeds, reports no
  drop when every prompt holds one frame, and the `rl:` Qwen3-VL answers a chat with an image;
- a job body whose config names another `[model].source` than the model it sends is refused at create."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend_support import (
    TINY_TEXT,
    TINY_VL,
    BackendProcess,
    chat_jsonl,
    picture_jsonl,
    serve_backend,
    sft_body,
    upload,
    wait_for,
)
from conftest import REPO_ROOT, run_cli
from taskapp_support import served_app

pytestmark = pytest.mark.slow
pytest.importorskip("torch")
pytest.importorskip("crafter")

ENV_KEY = "sk_env_rl_paths_0123456789"
TERMINAL = {"succeeded", "failed", "cancelled"}
TINY_CONFIG = REPO_ROOT / "examples" / "configs" / "rl_tiny_local.toml"


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    yield from serve_backend(tmp_path_factory, "rl-paths", tiny=(TINY_TEXT, TINY_VL),
                             env={"ENVIRONMENT_API_KEY": ENV_KEY, "SYNTH_AI_BACKEND_WARM_WORKER": "0"})


def _serve(app_id: str, backend: BackendProcess):
    """`synth-ai serve <app_id>` on this machine: it calls the backend's inference with the backend's own key."""
    with served_app(app_id, ENV_KEY, cwd=backend.data_dir.parent, isolated=True,
                    SYNTH_AI_HOME=str(backend.data_dir)) as url:
        yield url


@pytest.fixture(scope="module")
def color_app(backend: BackendProcess):
    yield from _serve("color-quiz", backend)


@pytest.fixture(scope="module")
def crafter_app(backend: BackendProcess):
    yield from _serve("crafter", backend)


def _finished(api: httpx.Client, route: str, timeout: float = 600) -> dict[str, Any]:
    return wait_for(lambda: (j := api.get(route).json())["status"] in TERMINAL and j, timeout=timeout,
                    interval=0.5, what=route)


def _lora_rl_config(path: Path) -> Path:
    """The shipped tiny config with LoRA, one iteration of 2 seeds x 4 rollouts, no evaluation."""
    text = TINY_CONFIG.read_text()
    for old, new in (('trainer_mode = "full"', 'trainer_mode = "lora"'), ("iterations_per_epoch = 16",
                     "iterations_per_epoch = 1"), ("batch_size = 4", "batch_size = 2"),
                     ("group_size = 8", "group_size = 4")):
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text.split("[evaluation]")[0] + "[tags]\nexperiment = \"rl-paths\"\n")
    return path


def test_ft_lora_then_rl_lora_charts_reward_answers_and_evaluates(backend: BackendProcess, color_app: str,
                                                                    tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with backend.client() as api:
        file_id = upload(api, chat_jsonl(tmp_path / "sft.jsonl")).json()["id"]
        created = api.post("/learning/jobs", json=sft_body(file_id, steps=2, train_kind="peft", lora_rank=4,
                                                           lora_alpha=8, lora_dropout=0.0))
        assert created.status_code == 201, created.text
        sft_id = created.json()["id"]
        api.post(f"/learning/jobs/{sft_id}/start")
        sft = _finished(api, f"/learning/jobs/{sft_id}")
        assert sft["status"] == "succeeded", sft
    fine_tuned = sft["fine_tuned_model"]
    assert fine_tuned == f"ft:{TINY_TEXT}:{sft_id}"

    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    result = run_cli("train", "--type", "rl", "--config", str(_lora_rl_config(tmp_path / "rl.toml")),
                     "--task-url", color_app, "--backend", backend.url, "--model", fine_tuned,
                     "--stream-format", "chart", "--poll-interval", "0.5")
    out = result.stdout
    assert result.exit_code == 0, out + result.stderr
    assert "Using live loss chart (metric=train.loss) and reward chart (metric=reward.mean)" in out
    # the final panel: one line per series with a value, reward as well as loss
    for series in ("reward.mean", "loss"):
        assert any(line.strip("│ ").startswith(f"{series} ") for line in out.splitlines()), (series, out)
    assert "step 0: " in out and "Final status: succeeded" in out
    model = out.split("fine_tuned_model: ", 1)[1].split()[0].strip(",\"'")
    assert model.startswith(f"rl:{TINY_TEXT}:rljob")

    with backend.client() as api:
        job_id = model.rsplit(":", 1)[1]
        started = next(e for e in events_of(api, f"/rl/jobs/{job_id}") if e["type"] == "rl.train.started")
        assert started["data"]["model"] == fine_tuned and started["data"]["mode"] == "lora"
        answer = api.post("/inference/v1/chat/completions", json={
            "model": model, "messages": [{"role": "user", "content": "What color is the sky?"}], "max_tokens": 6})
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == model and answer.json()["choices"][0]["message"]["content"] is not None

    db = tmp_path / "traces.db"
    evaluated = run_cli("--json", "eval", "color-quiz", "--model", model, "--url", color_app, "--backend",
                        backend.url, "--seeds", "0,1", "--trace-db", str(db))
    assert evaluated.exit_code == 0, evaluated.stdout + evaluated.stderr
    doc = evaluated.json()
    assert doc["model"] == model and [r["status"] for r in doc["results"]] == ["ok", "ok"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM session_traces").fetchone()[0] == 2
        called = [r[0] for r in conn.execute("SELECT model_name FROM events WHERE event_type = 'cais'")]
    assert called == [model, model]


def events_of(api: httpx.Client, route: str) -> list[dict[str, Any]]:
    return api.get(f"{route}/events", params={"since_seq": 0, "limit": 1000}).json()["events"]


def _crafter_body(url: str) -> dict[str, Any]:
    """Two-turn vision episodes with LoRA, one image allowed per policy call (`max_images_per_step = 1`)."""
    config = {
        "algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"},
        "model": {"base": TINY_VL, "trainer_mode": "lora", "label": "crafter-vl"},
        "rollout": {"env_name": "crafter", "policy_name": "crafter-react", "max_turns": 2, "episodes_per_batch": 2,
                    "max_concurrent_rollouts": 2, "use_vision": True, "max_images_per_step": 1,
                    "policy_config": {"temperature": 1.0, "max_tokens": 16}},
        "training": {"num_epochs": 1, "iterations_per_epoch": 1, "max_turns": 2, "batch_size": 1, "group_size": 2,
                     "learning_rate": 1e-3, "weight_sync_interval": 1, "log_interval": 1, "seed": 1}}
    return {"job_type": "rl", "data": {"endpoint_base_url": url, "model": TINY_VL, "config": config}}


def test_crafter_vision_job_through_the_backend_and_its_model_sees(backend: BackendProcess, crafter_app: str) -> None:
    """The crafter app's prompts carry one frame each (the tiny model never acts, so no turn adds the frames seen
    after actions): within `max_images_per_step = 1` nothing is dropped, and no drop is reported. (Dropping itself
    is covered in test_rl_crafter.py: only a model that acts makes the bundled app send two frames.)"""
    with backend.client() as api:
        created = api.post("/rl/jobs", json=_crafter_body(crafter_app))
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        job = _finished(api, f"/rl/jobs/{job_id}")
        assert job["status"] == "succeeded", (job, backend.log())
        seen = events_of(api, f"/rl/jobs/{job_id}")
        started = next(e for e in seen if e["type"] == "rl.train.started")
        assert started["data"]["vision"] is True and started["data"]["mode"] == "lora"
        step = next(e for e in seen if e["type"] == "rl.train.step")["data"]
        assert step["rollouts"] == 2 and step["errors"] == 0 and step["response_tokens_mean"] > 0
        assert not [e for e in seen if e["type"] == "rl.images.dropped"]

        model = job["fine_tuned_model"]
        assert model == f"rl:{TINY_VL}:{job_id}"
        picture = picture_jsonl(backend.data_dir.parent / "pictures.jsonl", n=1).read_text()
        content = json.loads(picture)["messages"][0]["content"]
        answer = api.post("/inference/v1/chat/completions", json={
            "model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 6})
        text_only = api.post("/inference/v1/chat/completions", json={
            "model": model, "messages": [{"role": "user", "content": content[1:]}], "max_tokens": 6})
        assert answer.status_code == 200 and text_only.status_code == 200, answer.text + text_only.text
        assert answer.json()["model"] == model
        with_image, without = answer.json()["usage"]["prompt_tokens"], text_only.json()["usage"]["prompt_tokens"]
        assert with_image > without, (with_image, without)  # the image's tokens are in the prompt


def test_a_body_whose_config_names_another_source_is_refused(backend: BackendProcess, color_app: str) -> None:
    """`[model].source` in the config and the model the body names must agree: the backend used to train the
    body's base model silently, ignoring the source the config asks to continue from."""
    config = {"model": {"source": f"ft:{TINY_TEXT}:job_elsewhere", "trainer_mode": "lora"}}
    with backend.client() as api:
        response = api.post("/rl/jobs", json={"job_type": "rl", "data": {
            "endpoint_base_url": color_app, "base_model": TINY_TEXT, "config": config}})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_job" and error["details"]["field"] == "data.config.model.source"
    assert f"ft:{TINY_TEXT}:job_elsewhere" in error["message"] and "Send data.model = " in response.text
