"""Seeds that fail are failures: a task app that errors or hangs on some seeds (errors and timeouts, never zeros,
exit 11, only finished seeds stored; answers are never waited for as if the app were away), and Ctrl-C in the
middle of a run (finished seeds kept, nothing half-written)."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import pytest

from eval_support import answering_policy, by_seed, write_config
from taskapp_support import scripted_model, subprocess_env, synth_ai_command

FLAKY_APP = textwrap.dedent('''
    import asyncio

    from synth_ai.taskapp import (RolloutError, RolloutMetrics, RolloutResponse, RolloutStep, RolloutTrajectory,
                                  TaskAppConfig, TaskAppEntry, TaskAppError, TaskInfo, register_task_app)

    ANSWERS = {  # seeds 10-12: errors the app answers itself, with statuses a gateway might send too
        10: (503, "missing_openai_api_key", "OPENAI_API_KEY is not configured"),
        11: (401, "unauthorised", "that key is not allowed here"),
        12: (502, "inference_failed", "the model endpoint failed"),
    }

    async def rollout(request, fastapi_request=None):
        seed = int(request.env.seed)
        if seed in ANSWERS:
            status, code, message = ANSWERS[seed]
            raise TaskAppError(message, status_code=status, code=code)
        if seed == 13:
            return {"hello": "world", "seed": seed}
        if seed % 3 == 1:
            raise RolloutError(f"seed {seed} broke", status_code=500, code="boom")
        if seed % 3 == 2:
            await asyncio.sleep(60)
        step = RolloutStep(obs={"task_id": f"flaky:{seed}", "prompt": f"say {seed}"}, tool_calls=[], reward=0.0,
                           done=True)
        return RolloutResponse(
            run_id=request.run_id,
            trajectories=[RolloutTrajectory(env_id=f"flaky:{seed}", policy_id="p", steps=[step],
                                            final={"observation": {"completion": "nope"}}, length=1,
                                            inference_url="http://unused")],
            metrics=RolloutMetrics(episode_returns=[0.0], mean_return=0.0, num_steps=1, num_episodes=1,
                                   outcome_score=0.0))

    def build():
        return TaskAppConfig(app_id="flaky-app", name="Flaky", description="fails on purpose",
                             base_task_info=TaskInfo(task={"id": "flaky", "name": "Flaky"}, environment="flaky"),
                             describe_taskset=lambda: {"id": "flaky"}, provide_task_instances=lambda s: [],
                             rollout=rollout)

    register_task_app(entry=TaskAppEntry(app_id="flaky-app", description="fails on purpose", config_factory=build))
''')


def test_errors_and_timeouts_are_reported_not_scored(cli, isolated_home: Path, monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "flaky_task_app.py").write_text(FLAKY_APP)
    monkeypatch.setenv("SYNTH_TASK_APP_SEARCH_PATH", str(apps))
    db = isolated_home / "t.db"
    args = ["eval", "flaky-app", "--model", "synth-ai/tiny-qwen3", "--seeds", "0-5", "--concurrency", "6", "--rollout-timeout", "1",
            "--trace-db", str(db), "--backend", "http://127.0.0.1:9"]
    result = cli("--json", *args)
    assert result.exit_code == 11, result.stdout + result.stderr
    doc = result.json()
    statuses = {r["seed"]: r["status"] for r in doc["results"]}
    assert statuses == {0: "ok", 1: "error", 2: "timeout", 3: "ok", 4: "error", 5: "timeout"}
    for r in doc["results"]:
        if r["status"] == "ok":
            assert r["official_score"] == 0.0 and r["task_id"] == f"flaky:{r['seed']}"
        else:
            assert "official_score" not in r and "outcome_score" not in r
    assert "boom: seed 1 broke" in doc["results"][1]["error"] and "HTTP 500" in doc["results"][1]["error"]
    assert doc["summary"] == {**doc["summary"], "ok": 2, "failed": 4, "errors": 2, "timeouts": 2, "stored": 2,
                              "official_mean": 0.0}
    stored = by_seed(db)
    assert sorted(stored) == [0, 3]
    assert stored[3]["metadata"]["prompt"] == "say 3" and stored[3]["metadata"]["completion"] == "nope"
    assert stored[3]["messages"] == ["user", "assistant"]  # from the response: the app records no messages
    human = cli(*args[:4], "--seeds", "0,1", *args[6:])
    assert human.exit_code == 11
    assert "Eval complete: 1 ok, 1 failed" in human.stdout and "error: HTTP 500" in human.stdout


def test_answers_are_errors_at_once_never_waited_for(cli, isolated_home: Path, monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    """The app's own coded 503 and 502, an auth refusal and a wrong body are answers: no wait for the app
    (tests/test_eval_taskapp_outage.py waits for one that is away), each seed an error at once."""
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "flaky_task_app.py").write_text(FLAKY_APP)
    monkeypatch.setenv("SYNTH_TASK_APP_SEARCH_PATH", str(apps))
    config = isolated_home / "eval.toml"
    config.write_text('[eval]\napp_id = "flaky-app"\nmodel = "synth-ai/tiny-qwen3"\nseeds = "10-13"\nconcurrency = 4\n'
                      'task_app_wait_s = 120\n')
    result = cli("--json", "eval", "--config", str(config), "--trace-db", "none", "--backend", "http://127.0.0.1:9")
    assert result.exit_code == 11, result.stdout + result.stderr
    errors = {r["seed"]: (r["status"], r.get("http_status"), r["error"]) for r in result.json()["results"]}
    assert errors[10][:2] == ("error", 503) and "missing_openai_api_key" in errors[10][2]
    assert errors[11][:2] == ("error", 401) and "unauthorised" in errors[11][2]
    assert errors[12][:2] == ("error", 502) and "inference_failed" in errors[12][2]
    assert errors[13][:2] == ("error", 200) and "not a rollout response" in errors[13][2]
    assert "cannot be reached" not in result.stdout + result.stderr


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_ctrl_c_keeps_every_finished_seed(isolated_home: Path) -> None:
    slow_from = 3

    released = threading.Event()  # set once the eval has exited, so the model server can shut down at once

    async def policy(body):
        user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        if user in slow_problems:
            for _ in range(600):  # hangs until released (60 s at most)
                if released.is_set():
                    break
                await asyncio.sleep(0.1)
        return answering_policy()(body)

    from eval_support import math_rows

    slow_problems = {row["problem"] for row in math_rows("test")[slow_from:]}
    db = isolated_home / "ctrl-c.db"
    with scripted_model(policy) as (model_url, _):
        config = write_config(isolated_home / "eval.toml", model_url, seeds="0-9", concurrency=1)
        # stderr goes to a file: the test reads the seed lines while the eval runs. The interrupt waits until the
        # last fast seed is both stored and reported (its trace is written just before its line is printed).
        err_path = isolated_home / "eval.stderr"
        with open(err_path, "w") as err:
            process = subprocess.Popen([*synth_ai_command(), "eval", "--config", str(config), "--trace-db", str(db)],
                                       stdout=subprocess.PIPE, stderr=err, text=True, cwd=isolated_home,
                                       env=subprocess_env(), stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (_count(db) >= slow_from
                                                       and f"seed={slow_from - 1} " in err_path.read_text()):
                assert process.poll() is None, (process.communicate(), err_path.read_text())
                time.sleep(0.05)
            assert _count(db) == slow_from
            process.send_signal(signal.SIGINT)
            stdout, _ = process.communicate(timeout=30)
            stderr = err_path.read_text()
        finally:
            released.set()
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 130, stdout + stderr
    assert "Interrupted: 3 seed(s) finished, 3 stored" in stderr
    stored = by_seed(db)
    assert sorted(stored) == [0, 1, 2]
    for session in stored.values():  # whole sessions only
        assert session["outcomes"] == [(1, 0)] and session["messages"] == ["system", "user", "assistant"]
    with sqlite3.connect(db) as conn:
        orphans = conn.execute("SELECT COUNT(*) FROM messages WHERE session_id NOT IN "
                               "(SELECT session_id FROM session_traces)").fetchone()[0]
    assert orphans == 0


def _count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM session_traces").fetchone()[0]
    except sqlite3.OperationalError:  # the schema is being created
        return 0


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_a_seed_interrupted_while_its_session_is_written_counts_as_stored(isolated_home: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C while a session is being written: the write completes (one transaction), so the seed finished and
    # was stored; the interrupted run's tally must say so. The disk is made slow to hold the write open.
    import os

    from synth_ai.eval.flow import Hooks, run_eval
    from synth_ai.eval.eval_settings import EvalOptions
    from synth_ai.tracing.store import TraceStore

    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "flaky_task_app.py").write_text(FLAKY_APP)  # seed 0 answers at once
    monkeypatch.setenv("SYNTH_TASK_APP_SEARCH_PATH", str(apps))
    writing, release = threading.Event(), threading.Event()
    real_insert = TraceStore._insert

    def slow_insert(conn, session):  # inside the write's lock and transaction, as a slow disk would be
        writing.set()
        release.wait(30)
        real_insert(conn, session)

    monkeypatch.setattr(TraceStore, "_insert", staticmethod(slow_insert))

    def interrupt_mid_write() -> None:
        if writing.wait(60):
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends; asyncio.run turns it into cancellation
            time.sleep(0.3)
        release.set()

    finished = []
    db = isolated_home / "mid-write.db"
    options = EvalOptions(app_id="flaky-app", model="synth-ai/tiny-qwen3", seeds="0", trace_db=str(db),
                          backend="http://127.0.0.1:9", concurrency=1)
    threading.Thread(target=interrupt_mid_write, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run_eval(options, Hooks(finished=finished.append))
    assert [(r.seed, r.status, r.stored) for r in finished] == [(0, "ok", True)]
    assert sorted(by_seed(db)) == [0]
