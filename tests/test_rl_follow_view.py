"""Following an RL job shows its numbers: reward, loss and eval lines from `rl.train.step` / `rl.eval.summary`
events and `reward.mean` / `loss` / `eval.mean_return` metrics, a chart that draws reward as well as loss, and the
last values once the job ends. The job lives in a real backend (`synth-ai backend serve`), written while the CLI
follows it through the backend's own JobStore, as its RL worker writes it."""

from __future__ import annotations

import re
import threading
import time

import pytest
from backend_support import BackendProcess
from conftest import run_cli

from synth_ai.backend.store import job_records as J
from synth_ai.backend.store.db import Database

REWARDS = [0.125, 0.375, 0.625]
LOSSES = [0.5, 0.25, 0.0625]


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    proc = BackendProcess(tmp_path_factory.mktemp("rl-follow") / "data").start()
    yield proc
    proc.stop()


def _rl_job(backend: BackendProcess) -> tuple[str, threading.Thread]:
    """A created RL job, and a thread that runs it through three iterations and an eval, as a worker would."""
    store = J.JobStore(Database(backend.data_dir / "backend" / "backend.sqlite3"))
    with store.db.tx() as conn:
        job_id = store.insert(conn, kind="rl", training_type="rl_online", model="synth-ai/tiny-qwen3",
                              payload={"job_type": "rl"}, files=[], prefix="rljob")

    def work() -> None:
        time.sleep(1.0)  # mostly after the follower's first poll (either way the test holds)
        store.transition(job_id, "running", only_from={"created"},
                         event=("rl.train.started", "GSPO started", {"iterations": 3}, "info"))
        for step, (reward, loss) in enumerate(zip(REWARDS, LOSSES)):
            time.sleep(0.3)  # let the follower poll in between: these arrive while it follows
            store.add_metric(job_id, "reward.mean", step, reward)
            store.add_metric(job_id, "loss", step, loss)
            store.add_metric(job_id, "staleness.mean", step, float(step))  # asynchronous GSPO's
            store.add_metric(job_id, "mismatch_kl", step, 0.001 * (step + 1))
            store.add_event(job_id, "rl.train.step", f"iteration {step + 1}/3",
                            {"iteration": step + 1, "reward_mean": reward, "loss": loss})
        store.add_event(job_id, "rl.backlog.growing", "iteration 2: 16 finished groups wait for the trainer",
                        {"iteration": 2, "backlog_groups": 16}, "warning")
        store.add_metric(job_id, "eval.mean_return", 2, 0.75, phase="eval")
        store.add_event(job_id, "rl.eval.summary", "eval on 4 seeds", {"mean_return": 0.75, "seeds": 4})
        store.transition(job_id, "succeeded", only_from={"running"}, fine_tuned_model="rl:tiny-qwen3:follow",
                         event=(J.EV_COMPLETED, "Job completed: rl:tiny-qwen3:follow", None, "info"))

    return job_id, threading.Thread(target=work)


def _follow(backend: BackendProcess, monkeypatch, *extra: str):
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    job_id, worker = _rl_job(backend)
    worker.start()
    try:
        return job_id, run_cli("jobs", "events", job_id, "--follow", "--kind", "rl", "--poll-interval", "0.05",
                               "--backend", backend.url, *extra)
    finally:
        worker.join()


def test_lines_show_reward_loss_and_eval(backend, monkeypatch):
    job_id, result = _follow(backend, monkeypatch)
    assert result.exit_code == 0, result.stdout + result.stderr
    out = result.stdout
    for step, (reward, loss) in enumerate(zip(REWARDS, LOSSES)):
        assert f"reward.mean={reward} (step={step})" in out
        assert f"loss={loss} (step={step})" in out
        # numbers the message does not already show ("iteration" is in it)
        assert f"rl.train.step (info): iteration {step + 1}/3  (reward_mean={reward}, loss={loss})" in out
    assert "eval.mean_return=0.75 (step=2)" in out
    assert "rl.eval.summary (info): eval on 4 seeds  (mean_return=0.75)" in out
    # the summary after the job ends, then the model
    tail = out[out.index("reward.mean = "):]
    assert tail.index("reward.mean = 0.625 (step 2)") < tail.index("Final status: succeeded")
    assert "eval.mean_return = 0.75 (step 2)" in tail and "loss = 0.0625 (step 2)" in tail
    assert "fine_tuned_model: rl:tiny-qwen3:follow" in tail


def test_json_result_carries_the_last_metrics(backend, monkeypatch):
    _, result = _follow(backend, monkeypatch, "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["last_metrics"]["reward.mean"] == {"step": 2, "value": 0.625}
    assert doc["last_metrics"]["eval.mean_return"] == {"step": 2, "value": 0.75}
    assert doc["fine_tuned_model"] == "rl:tiny-qwen3:follow"


def test_chart_draws_reward_and_loss(backend, monkeypatch):
    _, result = _follow(backend, monkeypatch, "--stream-format", "chart")
    assert result.exit_code == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Using live loss chart (metric=train.loss) and reward chart (metric=reward.mean)" in out
    final_panel = out[out.rindex("training"):]
    assert "reward.mean" in final_panel and "step 2: 0.625" in final_panel
    assert "loss" in final_panel and "step 2: 0.0625" in final_panel
    assert "▁▅█" in final_panel  # rewards rise: lowest, middle, highest
    assert "staleness.mean" in final_panel and "step 2: 2" in final_panel  # asynchronous GSPO's series too
    assert "mismatch_kl" in final_panel and "step 2: 0.003" in final_panel
    assert "█▄▁" in final_panel  # losses fall
    assert "Final status: succeeded" in out


def test_progress_bar_shows_iterations_reward_and_eval(backend, monkeypatch):
    _, result = _follow(backend, monkeypatch, "--stream-format", "bar")
    assert result.exit_code == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"rljob_\w+ iteration .*━.* 3/3 eta .* loss 0\.0625 +reward 0\.625 +eval 0\.75", out), out
    assert "rl.train.step (info): iteration 3/3  (reward_mean=0.625, loss=0.0625)" in out, "events above the bar"
    assert "reward.mean=" not in out, "metric points move the bar instead of printing lines"
    assert "Final status: succeeded" in out


def test_the_jobs_end_decides_not_the_trainers_last_event(backend, monkeypatch):
    """`rl.train.completed` (a terminal event for 0.2.17's streamer) comes before the worker records the job's end;
    when the job then fails, the follower says failed (exit 6), not succeeded."""
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    store = J.JobStore(Database(backend.data_dir / "backend" / "backend.sqlite3"))
    with store.db.tx() as conn:
        job_id = store.insert(conn, kind="rl", training_type="rl_online", model="synth-ai/tiny-qwen3",
                              payload={"job_type": "rl"}, files=[], prefix="rljob")
    store.transition(job_id, "running", only_from={"created"})

    def finish() -> None:
        time.sleep(0.5)
        store.add_event(job_id, "rl.train.completed", "GSPO finished: rl:x", {"fine_tuned_model": "rl:x"})
        time.sleep(1.0)  # the worker is still saving the model when the follower sees the event
        store.transition(job_id, "failed", only_from={"running"}, error="saving the model failed: disk full",
                         event=(J.EV_FAILED, "Job failed: saving the model failed: disk full", None, "error"))

    worker = threading.Thread(target=finish)
    worker.start()
    try:
        result = run_cli("jobs", "events", job_id, "--follow", "--kind", "rl", "--poll-interval", "0.05",
                         "--backend", backend.url)
    finally:
        worker.join()
    assert result.exit_code == 6, result.stdout + result.stderr
    assert "ended failed: saving the model failed: disk full" in result.stderr


def test_async_metrics_and_the_backlog_warning_reach_the_lines_and_jobs_metrics(backend, monkeypatch):
    job_id, result = _follow(backend, monkeypatch)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "staleness.mean=2 (step=2)" in result.stdout
    assert "rl.backlog.growing (warning): iteration 2: 16 finished groups wait for the trainer" in result.stdout
    listed = run_cli("jobs", "metrics", job_id, "--name", "mismatch_kl", "--kind", "rl", "--backend", backend.url,
                     "--json")
    assert listed.exit_code == 0, listed.stderr
    assert [(p["step"], p["value"]) for p in listed.json()["points"]] == [(0, 0.001), (1, 0.002), (2, 0.003)]
