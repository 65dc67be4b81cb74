"""The rollout side of an RL run, for real (tiny Qwen3, the color-quiz app over HTTP, `run_rl` in process): a
rollout that times out is counted and left out and its late policy calls are not kept; the concurrency bound
holds and a retry's back-off frees its slot; thinking_mode / thinking_budget from [rollout] reach the policy (also
under asynchronous GSPO). The first two assert the loop's control flow only and run on `fake_rl.py`'s fakes (a
scripted policy over real HTTP, no model); the thinking test samples with the real engine."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fake_rl import FakeRL
from rl_support import Recorder, hold_first_publish_until_calls, quiz_app, record_policy_calls, run_in_process
from taskapp_support import running_app

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

ENV_KEY = "sk_env_rl_limits_0123456789"
POLICY = {"temperature": 1.0, "max_tokens": 12, "timeout_s": 60}  # policy calls may outlive the rollout timeout


@pytest.fixture(autouse=True)
def env_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    return ENV_KEY


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> list:
    """The rollout engines `run_rl` builds (to look at what they still hold once the run is over)."""
    from synth_ai.backend.trainers.rl import engine_choice

    built: list = []
    real = engine_choice.build_rollout_engine

    def keep(*args, **kwargs):
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(engine_choice, "build_rollout_engine", keep)
    return built


def test_a_timed_out_rollout_is_counted_left_out_and_its_late_calls_are_dropped(tmp_path: Path):
    fakes = FakeRL()
    late = threading.Semaphore(0)  # released once per finished episode of the slow seed
    app = quiz_app(delay=lambda seed: 5.0 if seed == 1 else 0.0,
                   finished=lambda seed: late.release() if seed == 1 else None)

    def on_event(kind: str) -> None:
        if kind == "rl.rollouts.failed":  # hold the run until the timed-out episodes have called the policy
            for _ in range(4):
                assert late.acquire(timeout=120)

    recorder = Recorder(on_event=on_event)
    with running_app(app) as url:
        run_in_process(tmp_path, None, url, recorder, iterations_per_epoch=2, rollout_timeout_s=4.0,
                       rollout_retries=0, tables={"rollout": {"policy_config": POLICY}}, parts=fakes.parts())
    failures = recorder.of("rl.rollouts.failed")
    assert len(failures) == 1 and failures[0]["data"]["by_kind"] == {"timeout": 4}
    assert "did not answer within 4s" in failures[0]["data"]["first_error"]
    assert recorder.series("rollouts.errors") == [4, 0]
    steps = recorder.of("rl.train.step")
    assert [s["data"]["groups"] for s in steps] == [1, 2]  # seed 1's group is left out of iteration 0
    # 12 episodes made their call in time and the four late ones after their cids were settled: nothing is kept
    engines = fakes.engines
    assert engines and engines[0].requests == 12 + 4 and dict(engines[0]._calls) == {}


def test_concurrency_is_bounded_and_a_retry_back_off_frees_its_slot(tmp_path: Path):
    gauge: dict[str, int] = {}
    attempts: list[str] = []  # run ids in the order the task app got them
    first = "rljob_local-it0-s0-g0"
    app = quiz_app(delay=0.05, gauge=gauge, fail=lambda run_id: attempts.append(run_id) or run_id == first)
    recorder = Recorder()
    with running_app(app) as url:
        run_in_process(tmp_path, None, url, recorder, iterations_per_epoch=1, async_semaphore_max=1,
                       tables={"rollout": {"max_concurrent_rollouts": 8, "policy_config": POLICY}},
                       parts=FakeRL().parts())
    assert gauge["peak"] == 1  # min(max_concurrent_rollouts = 8, async_semaphore_max = 1)
    assert not recorder.of("rl.rollouts.failed")  # the failed attempt was retried and succeeded
    # while the failed attempt waits out its back-off, the next rollout takes the one slot
    assert attempts[0] == first and attempts[1] != f"{first}-r1" and f"{first}-r1" in attempts
    assert len(attempts) == 9


@pytest.mark.parametrize("max_staleness", [0, 1], ids=["sync", "async"])
def test_thinking_mode_and_budget_from_the_job_config_reach_inference(tmp_path: Path, tiny_text_models: list[Path],
                                                                      engines: list, monkeypatch: pytest.MonkeyPatch,
                                                                      max_staleness: int):
    """Also asynchronously (two iterations, the second sampled while the first trains): the budget holds for
    tokens sampled by every policy version."""
    taken: list = []
    record_policy_calls(monkeypatch, taken)
    recorder = Recorder()
    iterations = 1 + max_staleness
    if max_staleness:
        # batch 0 is 8 calls; its update publishes version 1 only once batch 1's first call is answered, so that
        # call is sampled by version 0 however the threads are scheduled
        hold_first_publish_until_calls(monkeypatch, 8 + 1)
    with running_app(quiz_app()) as url:
        run_in_process(tmp_path, tiny_text_models, url, recorder, iterations_per_epoch=iterations,
                       max_staleness=max_staleness,
                       tables={"rollout": {"thinking_mode": "think", "thinking_budget": 3}})
    tokenizer = engines[0].served.tokenizer
    close = tokenizer.convert_tokens_to_ids("</think>")
    samples = [s for call in taken for s in call.samples]
    assert len(samples) == 8 * iterations
    if max_staleness:  # the second batch was sampled (in part) by version 0 and trained at version 1
        assert recorder.series("staleness.max") == [0, 1]
        assert {v for s in samples for v in s.versions} <= {0, 1} and len(recorder.series("loss")) == 2
    for sample in samples:
        assert tokenizer.decode(sample.prompt_ids).endswith("<think>\n")  # the prompt opens the think block
        assert close in sample.completion_ids[:5]  # budget 3 (the prompt's "\n" counts): closed by position 4
        position = sample.completion_ids.index(close)
        assert position < 2 or sample.forced[position]  # a `</think>` the budget forced is marked so
