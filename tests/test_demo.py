"""`synth-ai demo --fast`: the whole loop through the real CLI, a real embedded backend (started by the demo and
stopped afterwards), the real color-quiz task app over HTTP, and real trace databases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from backend_support import TINY_TEXT, link_tiny, wait_for

pytestmark = pytest.mark.slow


def _demo(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "synth_ai", "demo", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _backend_status(env: dict[str, str]) -> int:
    return subprocess.run([sys.executable, "-m", "synth_ai", "backend", "status"], env=env,
                          capture_output=True, text=True).returncode


def _fresh_demo(root: Path, tiny_models: list[Path], cwd: Path) -> tuple[dict, Path, dict[str, str]]:
    """`demo --fast --json` from an empty data dir of its own (the built tiny model linked in) into `root/run`."""
    from conftest import free_port

    data = root / "data"
    link_tiny(data, tiny_models)
    env = {**os.environ, "SYNTH_AI_HOME": str(data), "SYNTH_AI_BACKEND_PORT": str(free_port())}
    run_dir = root / "run"
    proc = _demo("--fast", "--json", "--run-dir", str(run_dir), env=env, cwd=cwd)
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-4000:]
    return json.loads(stdout), run_dir, env


def _messages(sft_data: Path) -> list[list[dict]]:
    return [json.loads(line)["messages"] for line in sft_data.read_text().splitlines()]


def test_fast_demo_runs_the_loop_cleans_up_and_a_second_fresh_run_prints_the_same_scores(tiny_text_models, tmp_path,
                                                                                          isolated_home):
    doc, run_dir, env = _fresh_demo(tmp_path / "first", tiny_text_models, isolated_home)

    labels = [m["label"] for m in doc["models"]]
    assert labels == ["base", "SFT", "SFT + RL"]
    assert [m["model"].split(":")[0] for m in doc["models"]] == [TINY_TEXT, "ft", "rl"]
    assert all(m["score"] is not None and m["errors"] == 0 for m in doc["models"])
    assert doc["baseline"] == doc["models"][0]["score"] and doc["final"] == doc["models"][-1]["score"]
    assert doc["improvement"] == pytest.approx(doc["final"] - doc["baseline"])
    # Every step is a command a user can repeat, and every one of them succeeded.
    commands = [s["command"] for s in doc["steps"]]
    assert all(c.startswith("synth-ai ") for c in commands) and all(s["exit_code"] == 0 for s in doc["steps"])
    for verb in ("synth-ai eval", "synth-ai filter", "synth-ai train --type sft", "synth-ai train --type rl",
                 "synth-ai jobs events"):
        assert any(c.startswith(verb) for c in commands), verb
    # The run folder holds what the report says it does.
    assert (run_dir / "report.md").read_text().count("| ") >= 3
    for name in ("eval_held_out", "eval_sample", "filter", "sft", "rl"):
        assert (run_dir / "configs" / f"{name}.toml").is_file()
    lines = (run_dir / "sft_data.jsonl").read_text().splitlines()
    assert len(lines) == doc["sft_examples"] > 0
    assert all(json.loads(line)["messages"][-1]["role"] == "assistant" for line in lines)
    for chart in doc["charts"].values():
        assert Path(chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(doc["charts"]) == {"train.loss", "reward.mean"}
    # It stopped what it started: no backend answers afterwards.
    assert set(doc["stopped"]) == {"task app", "backend"}
    assert _backend_status(env) == 10

    # A second run from a clean data dir samples the same episodes, keeps the same SFT data in the same order, and
    # prints the same scores: what the README's table shows is what a fresh run prints.
    again, again_dir, _ = _fresh_demo(tmp_path / "second", tiny_text_models, isolated_home)
    assert [(m["label"], m["score"]) for m in again["models"]] == [(m["label"], m["score"]) for m in doc["models"]]
    assert _messages(again_dir / "sft_data.jsonl") == _messages(run_dir / "sft_data.jsonl")


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_interrupted_demo_stops_what_it_started_and_a_rerun_starts_cleanly(tiny_text_models, tmp_path, isolated_home):
    from conftest import free_port

    data = Path(os.environ["SYNTH_AI_HOME"])
    link_tiny(data, tiny_text_models)
    env = {**os.environ, "SYNTH_AI_BACKEND_PORT": str(free_port())}
    proc = _demo("--fast", "--run-dir", str(tmp_path / "first"), env=env, cwd=isolated_home)
    wait_for(lambda: (tmp_path / "first" / "traces.db").exists(), timeout=300, what="the baseline eval")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    deadline = time.monotonic() + 30
    while _backend_status(env) != 10 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _backend_status(env) == 10
    again = _demo("--fast", "--run-dir", str(tmp_path / "first"), env=env, cwd=isolated_home)
    _, stderr = again.communicate(timeout=120)
    assert again.returncode == 3 and "not empty" in stderr  # an old run folder is never overwritten
