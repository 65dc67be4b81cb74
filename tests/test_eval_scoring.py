"""The pure parts of eval: scores as synth-ai 0.2.17 computes them, Pearson r, and reading a reference-shaped
session trace back into a session (event and message typing, JSON payloads, timesteps)."""

from __future__ import annotations

import json

import pytest

from synth_ai.eval.policy import InferenceTarget, policy_config, rollout_body
from synth_ai.eval.scoring import official_score, outcome_score, pearson
from synth_ai.tracing.importer import recorder_from_session_trace, session_trace_of


@pytest.mark.parametrize("response, expected", [
    ({"metrics": {"mean_return": 0.25, "outcome_score": 1.0}}, 0.25),
    ({"metrics": {"total_reward": 3.0}}, 1.0),  # clamped
    ({"metrics": {"mean_return": -2}}, 0.0),
    ({"metrics": {"mean_return": True, "outcome_score": 0.5}}, 0.5),  # a boolean is not a score
    ({"metrics": {}, "trajectories": [{"steps": [{"reward": 0.75}]}]}, 0.75),
    ({"metrics": {"mean_return": float("nan")}, "trajectories": []}, None),
    ({}, None),
])
def test_official_score(response, expected) -> None:
    assert official_score(response) == expected


def test_outcome_and_pearson() -> None:
    assert outcome_score({"metrics": {"outcome_score": 1}}) == 1.0
    assert outcome_score({"metrics": {"mean_return": 1}}) is None
    assert pearson([1.0, 0.0, 1.0], [0.9, 0.1, 0.8]) == pytest.approx(0.9934, abs=1e-3)
    assert pearson([1.0, None, 0.0], [1.0, 5.0, 0.0]) == pytest.approx(1.0)  # only complete pairs count
    assert pearson([1.0], [1.0]) is None and pearson([1.0, 1.0], [0.0, 1.0]) is None  # too few / constant


def test_rollout_body_merges_policy_keys_and_keeps_the_model_flag() -> None:
    cfg = {"temperature": 0.3, "max_llm_calls": 2, "policy": {"temperature": 0.5, "model": "toml-model"},
           "policy_config": {"max_tokens": 64}, "env_config": {"difficulty": "easy"}, "env_name": "math",
           "max_turns": 3}
    body = rollout_body(seed=7, model="flag-model", split="test", cfg=cfg,
                        target=InferenceTarget("http://h/api/inference/v1/chat/completions", "embedded backend"))
    assert body["mode"] == "eval" and body["ops"] == ["agent", "env", "agent", "env"]
    assert body["env"] == {"config": {"split": "test", "index": 7, "difficulty": "easy"}, "seed": 7, "env_name": "math"}
    assert body["policy"]["config"] == {"temperature": 0.5, "model": "flag-model", "max_tokens": 64, "max_turns": 3,
                                        "inference_url": "http://h/api/inference/v1/chat/completions"}
    assert body["record"] == {"return_trace": True, "trace_format": "structured"}
    assert policy_config({"inference_url": "http://x/v1"})["inference_url"] == "http://x/v1"


def test_an_unset_trace_option_sends_its_default_not_null() -> None:
    """0.2.17's apps refuse `"return_trace": null` with 422; an option left empty sends the default."""
    body = rollout_body(seed=1, model="m", split="train", cfg={"return_trace": None, "trace_format": None},
                        target=InferenceTarget("http://h/v1/chat/completions", "config"))
    assert body["record"] == {"return_trace": True, "trace_format": "structured"}


def test_reference_shaped_session_trace_is_read_back() -> None:
    doc = {
        "session_id": "s-1", "created_at": "2026-01-01T00:00:00+00:00", "metadata": {"env": "x"},
        "session_time_steps": [{
            "step_id": "turn", "step_index": 0, "turn_number": 0, "timestamp": "2026-01-01T00:00:01+00:00",
            "events": [{"model_name": "m", "provider": "p", "call_records": [{"request": {}}],
                        "time_record": {"event_time": 1.5}},
                       {"reward": 1.0, "terminated": True, "time_record": {"event_time": 2.0}},
                       {"actions": ["up"]}],
            "markov_blanket_messages": [
                {"content": {"json_payload": json.dumps({"role": "user", "content": [{"type": "text", "text": "hi"}]})},
                 "message_type": "observation", "time_record": {"event_time": 1.0}},
                {"content": {"text": "answer"}, "message_type": "action", "time_record": {"event_time": 1.6}}],
        }],
    }
    assert session_trace_of({"session_trace": doc}) is doc and session_trace_of(doc) is doc
    assert session_trace_of({"session_id": "compact", "lm_calls": 1}) is None
    rec = recorder_from_session_trace(doc)
    assert rec.session_id == "s-1" and rec.created_at == doc["created_at"]
    assert [e.event_type for e in rec.events] == ["cais", "environment", "runtime"]
    assert rec.events[2].fields["metadata"] == {"actions": ["up"]}
    assert [(r.reward_value, r.reward_type) for r in rec.event_rewards] == [(1.0, "sparse")]
    assert [m.message_type for m in rec.messages] == ["system", "assistant"]
    assert rec.messages[0].content == {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert rec.messages[0].metadata == {"original_message_type": "observation"}
    assert rec.messages[1].content == "answer" and rec.messages[0].timestamp < rec.messages[1].timestamp
    assert [t.step_id for t in rec.timesteps] == ["turn"] and rec.events[0].timestep_index == 0
