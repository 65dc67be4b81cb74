"""RL with a task app that goes away and comes back, with real servers: `synth-ai serve color-quiz` in its own
process, stopped and started again on the same port. The job waits for it (`rl.taskapp.waiting`, `rl.taskapp.back`)
and goes on from the same iteration, also when a resumed job finds the app down at its start; an app that answers,
even with its own 502, is never waited for. (Past `[training].task_app_wait_s` the job fails with the reason:
tests/test_rl_faults.py.) What is asserted is the loop's control flow: the trainer and the rollout engine are
`fake_rl.py`'s fakes (a scripted policy over real HTTP, no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fake_rl import FakeRL
from rl_support import Recorder, quiz_app, run_in_process
from taskapp_support import RestartableApp, running_app

pytestmark = pytest.mark.slow

ENV_KEY = "sk_env_rl_outage_0123456789"
WINDOW_S = 120  # generous: the restarted app answers long before, even on a loaded machine


@pytest.fixture(autouse=True)
def env_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.setenv("SYNTH_AI_RL_PREFETCH", "0")  # the outage falls on a known iteration
    return ENV_KEY


@pytest.fixture
def quiz(tmp_path: Path):
    served = RestartableApp("color-quiz", ENV_KEY, cwd=tmp_path)
    yield served
    served.stop()


def test_a_task_app_that_restarts_mid_job_is_waited_for_and_the_iteration_goes_on(
        tmp_path: Path, quiz: RestartableApp):
    quiz.start()

    def on_event(kind: str) -> None:
        if kind == "rl.train.step" and quiz.starts == 1 and quiz.process is not None:
            quiz.stop()  # after iteration 0: iteration 1's rollouts find nothing there
        elif kind == "rl.taskapp.waiting":
            quiz.start(wait=False)  # back on the same port while the job waits

    recorder = Recorder(on_event=on_event)
    result = run_in_process(tmp_path, None, quiz.url, recorder, iterations_per_epoch=3,
                            rollout_retries=0, task_app_wait_s=WINDOW_S, parts=FakeRL().parts())

    assert result["fine_tuned_model"] == "rl:synth-ai/tiny-qwen3:rljob_local"
    assert quiz.starts == 2
    waiting, back = recorder.of("rl.taskapp.waiting"), recorder.of("rl.taskapp.back")
    assert len(waiting) == 1 and len(back) == 1
    assert waiting[0]["level"] == "warning"
    assert waiting[0]["data"] == {**waiting[0]["data"], "iteration": 1, "when": "rl", "rollouts": 8, "total": 8,
                                  "window_s": WINDOW_S, "task_url": quiz.url}
    assert "could not reach the task app" in waiting[0]["data"]["reason"]
    assert "cannot be reached" in waiting[0]["message"] and "[training].task_app_wait_s" in waiting[0]["message"]
    assert back[0]["data"]["iteration"] == 1 and "answers again" in back[0]["message"]
    types = [e["type"] for e in recorder.events]
    assert types.index("rl.taskapp.waiting") < types.index("rl.taskapp.back")
    # the same iteration went on, whole: every iteration trained once, on all its rollouts, none failed
    assert [e["data"]["iteration"] for e in recorder.of("rl.train.step")] == [0, 1, 2]
    assert all(e["data"]["errors"] == 0 and e["data"]["rollouts"] == 8 for e in recorder.of("rl.train.step"))
    assert not recorder.of("rl.rollouts.failed")
    assert recorder.series("rollouts.errors") == [0, 0, 0]


def test_a_resumed_job_whose_task_app_is_down_waits_for_it_at_start(tmp_path: Path, quiz: RestartableApp):
    """What a backend restart does to a job: its worker starts again from the checkpoint; the app is not back yet."""
    from synth_ai.backend.trainers.common import TrainingCancelled

    quiz.start()
    saved: list[bool] = []
    first = Recorder(on_event=lambda kind: saved.append(True) if kind == "rl.checkpoint.saved" else None)
    with pytest.raises(TrainingCancelled):
        run_in_process(tmp_path, None, quiz.url, first, should_stop=lambda: bool(saved), iterations_per_epoch=4,
                       checkpoint_interval=2, task_app_wait_s=WINDOW_S, parts=FakeRL().parts())
    quiz.stop()

    second = Recorder(on_event=lambda kind: quiz.start(wait=False) if kind == "rl.taskapp.waiting" else None)
    result = run_in_process(tmp_path, None, quiz.url, second, iterations_per_epoch=4,
                            checkpoint_interval=2, task_app_wait_s=WINDOW_S, parts=FakeRL().parts())

    assert result["fine_tuned_model"] == "rl:synth-ai/tiny-qwen3:rljob_local"
    waiting, back = second.of("rl.taskapp.waiting"), second.of("rl.taskapp.back")
    assert len(waiting) == 1 and len(back) == 1
    assert waiting[0]["data"]["when"] == "start" and waiting[0]["data"]["iteration"] == 2
    assert "before iteration 2" in waiting[0]["message"]
    assert second.of("rl.train.resumed")[0]["data"]["iteration"] == 2
    assert [e["data"]["iteration"] for e in second.of("rl.train.step")] == [2, 3]
    assert not second.of("rl.rollouts.failed")


def test_answers_are_not_waited_for_even_the_task_apps_own_502(tmp_path: Path):
    """A 502 with the task app's own error body (its model endpoint failed) is an answer, not an outage: the
    iterations fail as answers do (skipped, the job failing after three), with no wait."""
    from synth_ai.backend.trainers.rl.rollouts import TaskAppUnavailable
    from synth_ai.taskapp.errors import InferenceError

    def broken_model(run_id: str) -> bool:
        raise InferenceError("The model endpoint http://127.0.0.1:9/v1 answered HTTP 500: down")

    with running_app(quiz_app(fail=broken_model)) as app:
        recorder = Recorder()
        with pytest.raises(TaskAppUnavailable) as info:
            run_in_process(tmp_path, None, app, recorder, iterations_per_epoch=5, rollout_retries=0,
                           task_app_wait_s=WINDOW_S, parts=FakeRL().parts())
    assert "every rollout of iteration 2 failed" in str(info.value)
    assert "HTTP 502" in str(info.value) and "inference_failed" in str(info.value)
    assert not recorder.of("rl.taskapp.waiting") and not recorder.of("rl.taskapp.back")
    assert [f["data"]["by_kind"] for f in recorder.of("rl.rollouts.failed")] == [{"http": 8}] * 3
