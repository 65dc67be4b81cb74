"""Step rewards and the `[judge]` in a GSPO iteration (the color-quiz app over HTTP; the loop's trainer and rollout
engine `fake_rl.py`'s fakes, a scripted policy over real HTTP with no model: what is asserted is the rewards'
plumbing, not what a model learns), the judge
being a small OpenAI-compatible server written for the test (a stand-in for the provider at the transport level):
it gets one request per rollout with the provider's key, its first answer is garbage (counted, that rollout's score
left out, not scored 0) and the others score 0.5; the metrics `reward.step.mean`, `reward.judge.mean` and
`judge.failures` say so, and the blended reward is step rewards + judge exactly, also under asynchronous GSPO
(`max_staleness = 1`)."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from fake_rl import FakeRL
from rl_support import Recorder, quiz_app, run_in_process
from taskapp_support import completion, running_app, scripted_model

pytestmark = pytest.mark.slow

ENV_KEY = "sk_env_rl_judge_0123456789"
JUDGE_KEY = "sk-openai-judge-test-0123456789"
STEP_REWARDS = {"step_rewards_enabled": True, "step_rewards_mode": "env_sparse", "step_rewards_indicator_lambda": 1.0}


def _judge_tables(judge_url: str) -> dict:
    return {"judge": {"timeout_s": 30, "reward_blend": {"env": 1.0, "outcome": 1.0},
                      "options": {"provider": "openai", "model": "judge-model", "event": False, "base_url": judge_url}}}


def _sparse_step_mean(requests: list[dict]) -> float:
    """The mean step reward of the rollouts these judge requests graded (their reward, as the judge saw it);
    env_sparse with lambda 1: r + 1 when r > 0."""
    raw = [float(re.search(r'\\?"reward\\?": ([0-9.]+)', r["body"]["messages"][1]["content"]).group(1))
           for r in requests]
    return statistics.fmean(r + (1.0 if r > 0 else 0.0) for r in raw)


def test_step_rewards_and_judge_blend_in_one_iteration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", JUDGE_KEY)
    answers = iter(["I cannot judge this."])

    def judge(body):
        return completion(next(answers, '{"score": 0.5, "reason": "fine"}'))

    recorder = Recorder()
    with scripted_model(judge) as (judge_url, server), running_app(quiz_app()) as app:
        run_in_process(tmp_path, None, app, recorder, tables=_judge_tables(judge_url),
                       iterations_per_epoch=1, parts=FakeRL().parts(), **STEP_REWARDS)

    assert len(server.requests) == 8  # 2 seeds x 4 rollouts, outcome judging only
    first = server.requests[0]
    assert first["body"]["model"] == "judge-model" and first["headers"]["authorization"] == f"Bearer {JUDGE_KEY}"
    prompt = first["body"]["messages"][1]["content"]
    assert "What color is the" in prompt
    assert "0.5 right colour" in prompt  # no [judge].rubric: the rubric color-quiz advertises on /info
    # each rollout's graded reward, as the judge saw it; env_sparse with lambda 1: r + 1 when r > 0
    step_mean = recorder.series("reward.step.mean")[0]
    assert step_mean == pytest.approx(_sparse_step_mean(server.requests))
    assert recorder.series("reward.judge.mean") == [0.5] and recorder.series("judge.failures") == [1.0]
    # the garbage answer's rollout takes its group's mean judge score (0.5), not 0
    assert recorder.series("reward.mean")[0] == pytest.approx(step_mean + 0.5)
    failed = recorder.of("rl.judge.failed")
    assert len(failed) == 1 and failed[0]["data"]["by_kind"] == {"unparseable": 1}
    assert "I cannot judge this." in failed[0]["message"] and "not 0" in failed[0]["message"]
    started = recorder.of("rl.train.started")[0]["data"]
    assert (started["step_rewards"], started["judge"]) == ("env_sparse", "openai:judge-model")
    assert started["judge_rubrics"] == {"outcome": "task_app"}
    assert JUDGE_KEY not in json.dumps(recorder.events) + json.dumps(recorder.metrics)


def test_step_rewards_and_judge_blend_asynchronously(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`max_staleness = 1`, two iterations: the second batch is sampled while the first trains, and each
    iteration's reward is still its own step rewards + the judge's scores of its own rollouts."""
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", JUDGE_KEY)
    recorder = Recorder()
    # batch 0 is 8 calls; its update publishes version 1 only once batch 1's first call is answered (sampled by
    # version 0 however the threads are scheduled)
    fakes = FakeRL(first_publish_after_calls=8 + 1)
    with scripted_model(lambda body: completion('{"score": 0.5, "reason": "fine"}')) as (judge_url, server), \
            running_app(quiz_app()) as app:
        run_in_process(tmp_path, None, app, recorder, tables=_judge_tables(judge_url),
                       iterations_per_epoch=2, max_staleness=1, parts=fakes.parts(), **STEP_REWARDS)

    assert len(server.requests) == 16  # each iteration's 8 rollouts judged once, iteration by iteration
    step_means = recorder.series("reward.step.mean")
    assert step_means == pytest.approx([_sparse_step_mean(server.requests[:8]), _sparse_step_mean(server.requests[8:])])
    assert recorder.series("reward.judge.mean") == [0.5, 0.5] and not recorder.of("rl.judge.failed")
    assert recorder.series("reward.mean") == pytest.approx([m + 0.5 for m in step_means])
    assert recorder.series("staleness.max") == [0, 1]  # the second batch was sampled by the first version
    started = recorder.of("rl.train.started")[0]["data"]
    assert (started["max_staleness"], started["step_rewards"], started["judge"]) == (1, "env_sparse",
                                                                                     "openai:judge-model")
