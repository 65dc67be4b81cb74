"""`eval` against models of the embedded backend: the tiny base Qwen3 (the backend started on demand, as `train`
starts it), then the model a short SFT job fine-tuned, in-process and at `--url` against `synth-ai serve`."""

from __future__ import annotations

import json
import re
import subprocess
import sqlite3
from pathlib import Path

import pytest

from backend_support import TINY_TEXT, build_tiny_models, link_tiny
from conftest import REPO_ROOT, free_port, run_cli
from taskapp_support import ENV_KEY, stop, subprocess_env, synth_ai_command, wait_for_health

pytest.importorskip("torch")
pytest.importorskip("transformers")

SFT_CONFIG = REPO_ROOT / "examples" / "configs" / "sft_tiny_local.toml"
DATASET = REPO_ROOT / "examples" / "datasets" / "sft_math_small.jsonl"


def _eval_config(path: Path, **keys) -> Path:
    lines = ["[eval]", 'app_id = "math-single-step"', 'seeds = "0-1"', 'split = "test"', "concurrency = 2"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    lines += ["", "[eval.policy_config]", "max_tokens = 12", "temperature = 0.0", "timeout_s = 300"]
    path.write_text("\n".join(lines) + "\n")
    return path


def _models_called(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT model_name FROM events WHERE event_type = 'cais' ORDER BY id")]


def test_base_and_fine_tuned_tiny_models_from_the_embedded_backend(tmp_path_factory: pytest.TempPathFactory,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   isolated_home: Path) -> None:
    from synth_ai.env.paths import data_dir

    port = free_port()
    monkeypatch.setenv("SYNTH_AI_BACKEND_PORT", str(port))
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    link_tiny(data_dir(), build_tiny_models(tmp_path_factory.getbasetemp() / "ml-core-data", (TINY_TEXT,)))
    config = _eval_config(isolated_home / "eval.toml", model=TINY_TEXT)
    db = isolated_home / "traces.db"
    serve = None
    try:
        base = run_cli("--json", "eval", "--config", str(config), "--trace-db", str(db))
        assert base.exit_code == 0, base.stdout + base.stderr
        assert f"starting the embedded backend on 127.0.0.1:{port}" in base.stderr
        doc = base.json()
        assert doc["inference"] == "embedded backend"
        assert doc["inference_url"] == f"http://127.0.0.1:{port}/api/inference/v1/chat/completions"
        assert [r["status"] for r in doc["results"]] == ["ok", "ok"]
        assert all(isinstance(r["official_score"], float) for r in doc["results"])
        assert _models_called(db) == [TINY_TEXT, TINY_TEXT]

        # The example config as written: its model (Qwen/Qwen3-4B) is not on this offline machine, so every seed
        # is an error naming it, never a zero; with a model that is here, the same file runs.
        example = REPO_ROOT / "examples" / "configs" / "eval_math.toml"
        as_written = run_cli("--json", "eval", "--config", str(example), "--seeds", "0", "--trace-db", str(db))
        assert as_written.exit_code == 11, as_written.stdout + as_written.stderr
        missing = as_written.json()["results"][0]
        assert missing["status"] == "error" and "Qwen/Qwen3-4B" in missing["error"] and "official_score" not in missing
        tiny = run_cli("--json", "eval", "--config", str(example), "--model", TINY_TEXT, "--seeds", "0",
                       "--trace-db", "none")
        assert tiny.exit_code == 0, tiny.stdout + tiny.stderr
        assert tiny.json()["split"] == "test" and tiny.json()["results"][0]["task_id"] == "math_single_step:test:0"

        trained = run_cli("train", "--config", str(SFT_CONFIG), "--dataset", str(DATASET), "--poll-interval", "0.2")
        assert trained.exit_code == 0, trained.stdout + trained.stderr
        fine_tuned = re.search(r"fine_tuned_model: (ft:\S+)", trained.stdout).group(1).rstrip(",\"'")

        tuned = run_cli("--json", "eval", "--config", str(config), "--model", fine_tuned, "--trace-db", str(db))
        assert tuned.exit_code == 0, tuned.stdout + tuned.stderr
        assert tuned.json()["model"] == fine_tuned
        assert _models_called(db)[2:] == [fine_tuned, fine_tuned]

        app_port = free_port()
        serve = subprocess.Popen([*synth_ai_command(), "serve", "math-single-step", "--host", "127.0.0.1",
                                  "--port", str(app_port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, text=True, env=subprocess_env(), cwd=isolated_home)
        url = f"http://127.0.0.1:{app_port}"
        wait_for_health(url, process=serve)
        remote = run_cli("--json", "eval", "--config", str(config), "--model", fine_tuned, "--url", url,
                         "--seeds", "3", "--trace-db", str(db))
        assert remote.exit_code == 0, remote.stdout + remote.stderr
        assert remote.json()["task_app"] == url and remote.json()["results"][0]["status"] == "ok"
        assert _models_called(db)[4:] == [fine_tuned]
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT COUNT(*) FROM session_traces").fetchone()[0] == 5
            assert conn.execute("SELECT COUNT(*) FROM outcome_rewards").fetchone()[0] == 5
    finally:
        if serve is not None:
            stop(serve)
        stopped = run_cli("backend", "stop")
    assert stopped.exit_code == 0
