"""RL that learns: `synth-ai train --type rl` with examples/configs/rl_tiny_local.toml against a real embedded
backend (subprocess, SQLite) and the bundled color-quiz task app (subprocess, `synth-ai serve`), over HTTP.

The tiny Qwen3's mean reward must rise clearly over the run (seeded), and the resulting `rl:` model must answer at
the inference endpoint, start a second RL job as `[model].source`, and start an SFT job."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend_support import (
    TINY_TEXT,
    BackendProcess,
    chat_jsonl,
    link_tiny,
    sft_body,
    upload,
    wait_for,
)
from taskapp_support import REPO_ROOT, served_app, subprocess_env, synth_ai_command

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

ENV_KEY = "sk_env_rl_test_0123456789"
TERMINAL = {"succeeded", "failed", "cancelled"}
CONFIG = REPO_ROOT / "examples" / "configs" / "rl_tiny_local.toml"


@pytest.fixture
def color_quiz(tmp_path: Path):
    with served_app("color-quiz", ENV_KEY, cwd=tmp_path) as url:
        yield url


def train(backend: BackendProcess, task_url: str, *extra: str, timeout: float = 600) -> dict[str, Any]:
    env = subprocess_env(SYNTH_API_KEY=backend.key, SYNTH_AI_HOME=str(backend.data_dir), OMP_NUM_THREADS="1",
                         ENVIRONMENT_API_KEY=ENV_KEY)
    env.pop("BACKEND_BASE_URL", None)
    out = subprocess.run([*synth_ai_command(), "train", "--type", "rl", "--config", str(CONFIG), "--task-url",
                          task_url, "--backend", backend.url, "--poll-interval", "0.5", "--json", *extra],
                         capture_output=True, text=True, env=env, timeout=timeout, cwd=backend.data_dir.parent)
    assert out.returncode == 0, f"train exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return json.loads(out.stdout)


def series(api: httpx.Client, job_id: str, name: str) -> list[float]:
    points = api.get(f"/rl/jobs/{job_id}/metrics", params={"name": name, "limit": 5000}).json()["points"]
    return [p["value"] for p in sorted(points, key=lambda p: p["step"])]


def test_gspo_learns_color_quiz_and_the_rl_model_is_usable(tmp_path: Path, tiny_text_models: list[Path],
                                                           color_quiz: str):
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    backend = BackendProcess(data, env={"ENVIRONMENT_API_KEY": ENV_KEY}).start()
    try:
        doc = train(backend, color_quiz)
        job_id = doc.get("job_id") or doc.get("id") or doc["job"]["id"]
        with backend.client() as api:
            job = api.get(f"/rl/jobs/{job_id}").json()
            assert job["status"] == "succeeded", job
            model = job["fine_tuned_model"]
            assert model == f"rl:{TINY_TEXT}:{job_id}"

            rewards = series(api, job_id, "reward.mean")
            assert len(rewards) == 16
            first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
            assert last > first + 0.2, f"reward did not rise clearly: {rewards}"
            evals = series(api, job_id, "eval.mean_return")
            assert len(evals) == 3 and evals[-1] > evals[0], evals
            for name in ("reward.std", "loss", "clip_fraction", "kl", "response_tokens.mean", "rollouts.errors",
                         "rollouts_per_second"):
                assert len(series(api, job_id, name)) == 16, name
            events = api.get(f"/rl/jobs/{job_id}/events", params={"since_seq": 0, "limit": 1000}).json()["events"]
            types = [e["type"] for e in events]
            for kind in ("rl.job.created", "rl.job.queued", "rl.job.running", "rl.train.started", "rl.train.step",
                         "rl.eval.summary", "rl.checkpoint.saved", "rl.train.completed", "rl.job.completed"):
                assert kind in types, kind
            assert ENV_KEY not in json.dumps(events)

            # the rl: model answers at the inference endpoint, better than the model it started from
            from synth_ai.taskapp.discovery import find_task_app, import_app_module

            grade = import_app_module(find_task_app("color-quiz").path).grade

            def greedy(model_id: str) -> float:
                answer = api.post("/inference/v1/chat/completions", json={
                    "model": model_id, "messages": [{"role": "user", "content": "What color is the sky?"}],
                    "max_tokens": 12, "temperature": 0}).json()
                return grade(answer["choices"][0]["message"]["content"], "sky", "blue")["reward"]

            assert greedy(model) > greedy(TINY_TEXT)

        # and it is the source of another RL job ([model].source; two iterations show it trains and registers)
        config = tomllib.loads(CONFIG.read_text())
        config["model"].pop("base")
        config["model"]["source"] = model
        config["training"]["iterations_per_epoch"] = 2
        config.pop("evaluation")
        body = {"job_type": "rl", "data": {"endpoint_base_url": color_quiz, "config": config, "model": model}}
        with backend.client() as api:
            created = api.post("/rl/jobs", json=body)
            assert created.status_code == 201, created.text
            second_id = created.json()["id"]
            job = wait_for(lambda: (j := api.get(f"/rl/jobs/{second_id}").json())["status"] in TERMINAL and j,
                           timeout=300, interval=0.5, what="the second RL job")
            assert job["status"] == "succeeded", job
            assert job["fine_tuned_model"] == f"rl:{TINY_TEXT}:{second_id}"
            started = next(e for e in api.get(f"/rl/jobs/{second_id}/events", params={"limit": 1000}).json()[
                "events"] if e["type"] == "rl.train.started")
            assert started["data"]["model"] == model

            # and the start of an SFT job: this backend continues SFT from its own fine-tuned models
            file_id = upload(api, chat_jsonl(tmp_path / "sft.jsonl")).json()["id"]
            created = api.post("/learning/jobs", json=sft_body(file_id, steps=2, model=model))
            assert created.status_code == 201, created.text
            sft_id = created.json()["id"]
            api.post(f"/learning/jobs/{sft_id}/start")
            sft = wait_for(lambda: (j := api.get(f"/learning/jobs/{sft_id}").json())["status"] in TERMINAL and j,
                           timeout=300, interval=0.5, what="the SFT job")
            assert sft["status"] == "succeeded", sft
            assert sft["fine_tuned_model"] == f"ft:{TINY_TEXT}:{sft_id}"
            answer = api.post("/inference/v1/chat/completions", json={
                "model": sft["fine_tuned_model"], "messages": [{"role": "user", "content": "What is 2 plus 2?"}],
                "max_tokens": 8})
            assert answer.status_code == 200, answer.text
    finally:
        backend.stop()
