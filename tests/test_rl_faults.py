"""RL under faults, with real servers: cancel while rollouts are in flight, the backend killed mid-job (resumes
from its checkpoint), a task app that dies mid-job (the job fails with the reason once the wait for it is over), a
task app that answers garbage (a clear event, counted errors, no crash), and one that refuses the backend's key.
The two that run `run_rl` in this process assert the loop's control flow only and run on `fake_rl.py`'s fakes (a
scripted policy over real HTTP, no model); the backend's jobs train the tiny Qwen3."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from backend_support import TINY_TEXT, BackendProcess, link_tiny, wait_for
from conftest import free_port
from fake_rl import FakeRL
from rl_support import Recorder, quiz_app, rl_body, run_in_process
from taskapp_support import running_app, stop, subprocess_env, synth_ai_command, wait_for_health

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

ENV_KEY = "sk_env_rl_faults_0123456789"
TERMINAL = {"succeeded", "failed", "cancelled"}


@pytest.fixture(autouse=True)
def env_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    return ENV_KEY


def events(api: Any, job_id: str) -> list[dict[str, Any]]:
    return api.get(f"/rl/jobs/{job_id}/events", params={"since_seq": 0, "limit": 1000}).json()["events"]


def status(api: Any, job_id: str) -> str:
    return api.get(f"/rl/jobs/{job_id}").json()["status"]


def test_cancel_while_rollouts_are_in_flight(tmp_path: Path, tiny_text_models: list[Path]):
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    backend = BackendProcess(data, env={"ENVIRONMENT_API_KEY": ENV_KEY}).start()
    try:
        with running_app(quiz_app(delay=1.0)) as app, backend.client() as api:
            job_id = api.post("/rl/jobs", json=rl_body(app, iterations_per_epoch=500)).json()["id"]
            wait_for(lambda: any(e["type"] == "rl.train.step" for e in events(api, job_id)), timeout=180,
                     what="a first iteration")
            answer = api.post(f"/rl/jobs/{job_id}/cancel")
            assert answer.status_code == 200
            wait_for(lambda: status(api, job_id) in TERMINAL, timeout=60, what="the cancel")
            log = events(api, job_id)
            assert status(api, job_id) == "cancelled"
            stopped = next(e for e in log if e["type"] == "rl.train.stopped")
            assert "because the job was cancelled; rollouts in flight were cancelled" in stopped["message"]
            assert stopped["data"]["iteration"] >= 1
            assert log[-1]["type"] == "rl.job.cancelled"
            assert not any(e["type"] in ("rl.train.completed", "rl.job.completed") for e in log)
            assert api.get(f"/rl/jobs/{job_id}").json()["fine_tuned_model"] is None
    finally:
        backend.stop()


def test_backend_killed_mid_job_resumes_from_the_checkpoint(tmp_path: Path, tiny_text_models: list[Path]):
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    env = {"ENVIRONMENT_API_KEY": ENV_KEY}
    with running_app(quiz_app(delay=0.3)) as app:
        first = BackendProcess(data, env=env).start()
        try:
            with first.client() as api:
                job_id = api.post("/rl/jobs", json=rl_body(app, iterations_per_epoch=6, checkpoint_interval=2)
                                  ).json()["id"]
                wait_for(lambda: any(e["type"] == "rl.checkpoint.saved" for e in events(api, job_id)),
                         timeout=180, what="a checkpoint")
        finally:
            first.kill(signal.SIGKILL)
        second = BackendProcess(data, env=env).start()
        try:
            with second.client() as api:
                wait_for(lambda: status(api, job_id) in TERMINAL, timeout=240, interval=0.5,
                         what="the resumed job")
                job = api.get(f"/rl/jobs/{job_id}").json()
                log = events(api, job_id)
                assert job["status"] == "succeeded", (job, log[-5:])
                assert job["attempts"] == 2
                types = [e["type"] for e in log]
                assert "rl.job.requeued" in types
                stopped = next(e for e in log if e["type"] == "rl.train.stopped")  # nobody asked: it says why
                assert "because the backend process went away (it was killed or crashed)" in stopped["message"]
                resumed = next(e for e in log if e["type"] == "rl.train.resumed")
                assert resumed["data"]["iteration"] >= 2
                steps = [e["data"] for e in log if e["type"] == "rl.train.step"]  # re-run iterations say which run
                assert {s["attempt"] for s in steps} == {1, 2}, steps
                assert len({(s["iteration"], s["attempt"]) for s in steps}) == len(steps)
                points = api.get(f"/rl/jobs/{job_id}/metrics", params={"name": "reward.mean", "limit": 100}
                                 ).json()["points"]
                assert {p["step"] for p in points} == set(range(6))  # no hole where the kill happened
                assert job["fine_tuned_model"] == f"rl:{TINY_TEXT}:{job_id}"
        finally:
            second.stop()


def test_a_task_app_that_dies_mid_job_fails_it_with_the_reason_past_the_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The job waits `[training].task_app_wait_s` for the app to come back (it does not here), then fails with
    the reason. (An app that does come back: tests/test_rl_taskapp_outage.py.)"""
    from synth_ai.backend.trainers.rl.rollouts import TaskAppUnavailable

    # the app dies after iteration 0's step; with the overlap, iteration 1's rollouts would already be in it
    # (a dying prefetch: test_rl_prefetch.py)
    monkeypatch.setenv("SYNTH_AI_RL_PREFETCH", "0")
    port = free_port()
    app = subprocess.Popen([*synth_ai_command(), "serve", "color-quiz", "--port", str(port)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                           env=subprocess_env(ENVIRONMENT_API_KEY=ENV_KEY))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, ENV_KEY, process=app)
        recorder = Recorder(on_event=lambda kind: stop(app) if kind == "rl.train.step" else None)
        with pytest.raises(TaskAppUnavailable) as info:
            run_in_process(tmp_path, None, url, recorder, iterations_per_epoch=4, task_app_wait_s=1.5,
                           parts=FakeRL().parts())
    finally:
        stop(app)
    reason = str(info.value)
    assert reason.startswith(f"the task app at {url} could not be reached for ")
    assert "(the wait is [training].task_app_wait_s = 1.5)" in reason
    assert "Connect" in reason or "refused" in reason.lower()  # what the last probe met
    waiting = recorder.of("rl.taskapp.waiting")
    assert len(waiting) == 1 and waiting[0]["data"]["iteration"] == 1 and waiting[0]["data"]["rollouts"] == 8
    assert "could not reach the task app" in waiting[0]["data"]["reason"]
    assert not recorder.of("rl.taskapp.back")
    assert len(recorder.of("rl.train.step")) == 1 and not recorder.of("rl.train.completed")


def test_garbage_answers_are_counted_not_scored_and_all_garbage_fails_clearly(tmp_path: Path):
    with running_app(quiz_app(garbage=lambda seed: seed % 2 == 1)) as app:  # every other seed's group
        recorder = Recorder()
        result = run_in_process(tmp_path / "half", None, app, recorder, iterations_per_epoch=2,
                                parts=FakeRL().parts())
    assert result["fine_tuned_model"] == "rl:synth-ai/tiny-qwen3:rljob_local"
    failures = recorder.of("rl.rollouts.failed")
    assert len(failures) == 2 and all(f["data"]["by_kind"] == {"invalid_response": 4} for f in failures)
    assert "invalid rollout response" in failures[0]["message"] and failures[0]["level"] == "warning"
    errors = [v for name, _step, v in recorder.metrics if name == "rollouts.errors"]
    assert errors == [4, 4]
    steps = recorder.of("rl.train.step")
    assert all(s["data"]["groups"] == 1 for s in steps)  # the garbage group is left out, never scored 0

    from synth_ai.backend.trainers.rl.rollouts import TaskAppUnavailable

    with running_app(quiz_app(garbage=lambda seed: True)) as app:
        recorder = Recorder()
        with pytest.raises(TaskAppUnavailable) as info:
            run_in_process(tmp_path / "all", None, app, recorder, iterations_per_epoch=5, parts=FakeRL().parts())
    assert "every rollout of iteration 2 failed" in str(info.value)
    assert "invalid rollout response" in str(info.value)
    assert len(recorder.of("rl.rollouts.failed")) == 3 and not recorder.of("rl.train.step")
    # no update, but every failed iteration still has its counts on the metric series
    assert [(n, step, v) for n, step, v in recorder.metrics if n.startswith("rollouts.")] == [
        (name, it, value) for it in range(3) for name, value in (("rollouts.errors", 8), ("rollouts.total", 8))]


def test_the_environment_key_is_the_one_the_task_app_accepts_and_a_refusal_is_clear():
    from synth_ai.backend.trainers.rl.rollouts import pick_environment_key
    from synth_ai.errors import InvalidInputError

    with running_app(quiz_app()) as app:
        assert pick_environment_key(app, ["sk_env_wrong_one_000000", ENV_KEY]) == ENV_KEY
        with pytest.raises(InvalidInputError) as info:
            pick_environment_key(app, ["sk_env_wrong_one_000000", "sk_env_wrong_two_000000"])
    assert "refused every ENVIRONMENT_API_KEY this backend knows (2)" in info.value.message
    assert "setup --local" in info.value.hint
    assert ENV_KEY[:10] not in str(info.value) + info.value.hint  # the app's key fragments are not repeated


def test_a_job_whose_task_app_refuses_the_key_fails_with_the_reason_and_the_fix(tmp_path: Path,
                                                                               tiny_text_models: list[Path],
                                                                               monkeypatch: pytest.MonkeyPatch):
    """Refused at create when the app already refuses the backend's keys (400, nothing stored); and when the app
    changes its key after the create, the job fails at once with the reason and the fix."""
    data = tmp_path / "data"
    link_tiny(data, tiny_text_models)
    backend_key = "sk_env_not_the_apps_key_00000"
    backend = BackendProcess(data, env={"ENVIRONMENT_API_KEY": backend_key}).start()
    try:
        with running_app(quiz_app()) as app, backend.client() as api:
            refused = api.post("/rl/jobs", json=rl_body(app, iterations_per_epoch=2))
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "task_app_auth_failed"
            assert "setup --local" in refused.json()["error"]["hint"] and backend_key not in refused.text
            assert api.get("/rl/jobs").json()["data"] == []
            monkeypatch.setenv("ENVIRONMENT_API_KEY", backend_key)  # the app (it reads the key per request) accepts
            job_id = api.post("/rl/jobs", json=rl_body(app, iterations_per_epoch=2)).json()["id"]
            monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)  # ... and changes its key before the worker calls it
            wait_for(lambda: status(api, job_id) in TERMINAL, timeout=120, what="the job to fail")
            job = api.get(f"/rl/jobs/{job_id}").json()
            assert job["status"] == "failed"
            assert "refused every ENVIRONMENT_API_KEY this backend knows" in job["error"]
            assert "Hint:" in job["error"] and "setup --local" in job["error"]
            last = events(api, job_id)[-1]
            assert last["type"] == "rl.job.failed" and last["data"]["reason"] == job["error"]
            assert "sk_env_not_the_apps_key" not in job["error"] and ENV_KEY[:10] not in job["error"]
    finally:
        backend.stop()
