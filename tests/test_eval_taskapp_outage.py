"""`synth-ai eval` with a task app that goes away mid-run: a real `synth-ai serve math-single-step`, killed while it
runs a seed and started again on the same port. The seed waits for it and is sent again (not scored as failed).
(Answers are never waited for: tests/test_eval_failures.py.)"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from eval_support import answering_policy, by_seed, write_config
from taskapp_support import RestartableApp, scripted_model, subprocess_env, synth_ai_command

ENV_KEY = "sk_env_eval_outage_0123456789"
WINDOW_S = 120  # generous: the restarted app answers long before, even on a loaded machine


def test_a_seed_whose_task_app_restarts_is_sent_again_not_failed(isolated_home: Path, tmp_path: Path) -> None:
    app = RestartableApp("math-single-step", ENV_KEY, cwd=tmp_path)
    app.start()
    killed: list[bool] = []

    def policy(body):
        if not killed:  # seed 0's first policy call: the app dies with seed 0's /rollout in flight
            killed.append(True)
            app.kill()
        return answering_policy()(body)

    db = isolated_home / "outage.db"
    err_path = isolated_home / "eval.stderr"
    try:
        with scripted_model(policy) as (model_url, _):
            config = write_config(isolated_home / "eval.toml", model_url, task_app_url=app.url, seeds="0-2",
                                  concurrency=1, task_app_wait_s=WINDOW_S)
            with open(err_path, "w") as err:
                process = subprocess.Popen([*synth_ai_command(), "--json", "eval", "--config", str(config),
                                            "--trace-db", str(db)], stdout=subprocess.PIPE, stderr=err, text=True,
                                           cwd=isolated_home, env=subprocess_env(ENVIRONMENT_API_KEY=ENV_KEY),
                                           stdin=subprocess.DEVNULL)
            try:
                deadline = time.monotonic() + 120
                while "cannot be reached" not in err_path.read_text():
                    assert process.poll() is None, (process.communicate(), err_path.read_text())
                    assert time.monotonic() < deadline, err_path.read_text()
                    time.sleep(0.05)
                app.start(wait=False)  # back on the same port while the seed waits
                stdout, _ = process.communicate(timeout=180)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
    finally:
        app.stop()
    stderr = err_path.read_text()
    assert process.returncode == 0, stdout + stderr
    doc = json.loads(stdout)
    assert [(r["seed"], r["status"], r["official_score"]) for r in doc["results"]] == [(s, "ok", 1.0) for s in range(3)]
    assert f"The task app at {app.url} cannot be reached" in stderr and "seed 0 waits for it" in stderr
    assert "[eval].task_app_wait_s" in stderr and "answers again" in stderr
    assert stderr.index("cannot be reached") < stderr.index("answers again")
    assert sorted(by_seed(db)) == [0, 1, 2]
