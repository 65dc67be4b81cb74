"""Step rewards, per-turn returns, the judge blend and the judge's settings against hand calculations (no model):
`[training].step_rewards_*` / `event_rewards_kind` (and `[training.rewards]`), `group_returns`, `turn_advantages`,
`build_samples` with per-turn advantages, `[judge]` resolution, score parsing and the missing-key refusal."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from synth_ai.backend.trainers.rl.advantages import group_returns, read_rewards, turn_advantages
from synth_ai.backend.trainers.rl.judge import Judge, parse_score, require_judge_key, resolve_judge, transcript
from synth_ai.backend.trainers.rl.step_rewards import StepRewardSettings, resolve_step_rewards, step_rewards
from synth_ai.backend.trainers.rl.types import Rollout
from synth_ai.errors import InvalidInputError

EPS = 1e-4


def crafter_like(deltas: list[tuple[int, int]], rewards: list[float] | None = None) -> dict:
    """A rollout answer whose steps carry reference-style decision records (unique_delta, ach_delta)."""
    steps = [{"obs": {"text": f"turn {t}"}, "tool_calls": [], "reward": (rewards or [0.0] * len(deltas))[t],
              "info": {"meta": {"inference_url": "http://x", "decision_rewards":
                                {"turn": t, "unique_delta": u, "ach_delta": a}}}}
             for t, (u, a) in enumerate(deltas)]
    total = sum(rewards or [0.0])
    return {"trajectories": [{"steps": steps, "final": {"reward": 5.0}}],
            "metrics": {"mean_return": total, "episode_returns": [total], "outcome_score": 5.0}}


def test_settings_read_flat_and_nested_keys_nested_first_with_clear_errors():
    flat = resolve_step_rewards({"step_rewards_enabled": True, "step_rewards_mode": "env_sparse",
                                 "step_rewards_beta": 0.5, "event_rewards_kind": "absolute"})
    assert flat == StepRewardSettings(True, "env_sparse", "absolute", 0.0, 0.5, "consistent")
    nested = resolve_step_rewards({"step_rewards_mode": "env_sparse", "step_rewards_indicator_lambda": 9,
                                   "rewards": {"step_rewards_enabled": True, "step_rewards_mode": "decision_stepwise",
                                               "step_rewards_indicator_lambda": 0.25, "step_rewards_strategy":
                                               "per-achievement"}})
    assert (nested.mode, nested.indicator_lambda, nested.strategy) == ("decision_stepwise", 0.25, "per_achievement")
    assert resolve_step_rewards({"step_rewards_enabled": True}).mode == "decision_stepwise"  # enabled, no mode
    assert not resolve_step_rewards({"step_rewards_mode": "env_sparse"}).active  # a mode without the switch: off
    with pytest.raises(InvalidInputError, match=r"\[training.rewards\].step_rewards_mode must be one of off, "
                                                r"env_sparse, decision_stepwise \(found 'dense'\)"):
        resolve_step_rewards({"rewards": {"step_rewards_mode": "dense"}})
    with pytest.raises(InvalidInputError, match=r"\[training\].event_rewards_kind must be one of unique, absolute"):
        resolve_step_rewards({"event_rewards_kind": "all"})
    with pytest.raises(InvalidInputError, match=r"\[training\].step_rewards_beta must be a number >= 0.0"):
        resolve_step_rewards({"step_rewards_beta": -1})


def test_decision_stepwise_rewards_by_hand():
    doc = crafter_like([(0, 1), (2, 3), (0, 0)])
    unique = StepRewardSettings(True, "decision_stepwise", "unique", indicator_lambda=0.5, beta=0.1)
    # T = 3; only turn 1 unlocked something new: 2 + 0.5 + 0.1 * (3 - 1) = 2.7
    assert step_rewards(doc, unique) == pytest.approx([0.0, 2.7, 0.0])
    absolute = StepRewardSettings(True, "decision_stepwise", "absolute")
    assert step_rewards(doc, absolute) == [1.0, 3.0, 0.0]  # ach_delta counts repeats; no indicator bonus at turn 0
    # no decision record: the bundled Crafter app's first-time unlocks
    bare = {"trajectories": [{"steps": [{"info": {"achievements_unlocked": ["a", "b"]}}, {"info": {}}]}]}
    assert step_rewards(bare, unique) == pytest.approx([2.0 + 0.5 + 0.1 * 2, 0.0])
    assert step_rewards(doc, StepRewardSettings()) == []  # off


def test_env_sparse_uses_step_rewards_then_reward_last_step():
    doc = {"trajectories": [{"steps": [{"reward": 0.0}, {"reward": None, "obs": {"reward_last_step": 1.5}},
                                       {"reward": 2.0}]}]}
    settings = StepRewardSettings(True, "env_sparse", indicator_lambda=1.0, beta=0.5)
    # indicators at t=1, 2 (reward > 0): 1.5 + 1 + 0.5 * 2 = 3.5 ; 2 + 1 + 0.5 * 1 = 3.5
    assert step_rewards(doc, settings) == pytest.approx([0.0, 3.5, 3.5])


def member(index: int, env: float, steps: list[float], judge: dict | None = None, outcome: float = 0.0) -> Rollout:
    return Rollout(seed=0, index=index, cid=f"c{index}", reward=env, parts={"env": env, "event": sum(steps),
                   "outcome": outcome}, step_rewards=steps, judge=judge or {})


def test_per_turn_returns_and_advantages_by_hand():
    a, b = member(0, 2.0, [1.0, 0.0, 1.0]), member(1, 1.0, [0.0, 1.0])
    weights = {"env": 1.0, "event": 0.0, "outcome": 0.5}
    a.parts["outcome"] = 4.0
    returns = group_returns([a, b], weights, step_rewards_on=True)
    # reward to go + 0.5 * outcome: a = [2, 1, 1] + 2 ; b = [1, 1] + 0
    assert returns == [[4.0, 3.0, 3.0], [1.0, 1.0]]
    adv = turn_advantages(returns)
    # turn 0: mean 2.5, std 1.5 -> +-1.5 / (1.5 + 1e-4); turn 1: 3 vs 1 -> +-1 / (1 + 1e-4); turn 2: a alone -> None
    assert adv[0][0] == pytest.approx(1.5 / (1.5 + EPS)) and adv[1][0] == pytest.approx(-1.5 / (1.5 + EPS))
    assert adv[0][1] == pytest.approx(1 / (1 + EPS)) and adv[0][2] is None
    # per episode (step rewards off): the env part is the episode return
    assert group_returns([a, b], weights) == [[4.0], [1.0]]
    assert turn_advantages([[1.0, 2.0], [1.0, 2.0]]) is None  # no turn with variance


def test_judge_blend_and_a_missing_score_takes_the_group_mean():
    judge = SimpleNamespace(kinds=("outcome",), blend={"env": 0.5, "event": 0.0, "outcome": 2.0})
    members = [member(0, 1.0, [], {"outcome": 0.2}), member(1, 0.0, [], {"outcome": 0.6}), member(2, 3.0, [])]
    returns = group_returns(members, {"env": 1.0}, judge)
    # 0.5 * env + 2 * judge ; member 2 has no score: it takes mean(0.2, 0.6) = 0.4
    assert [r[0] for r in returns] == pytest.approx([0.5 + 0.4, 0.0 + 1.2, 1.5 + 0.8])
    nobody = group_returns([member(0, 1.0, []), member(1, 2.0, [])], {"env": 1.0}, judge)
    assert [r[0] for r in nobody] == [0.5, 1.0]  # nobody judged: the judge term is the same (0) for all


def _call(index: int, tokens: list[int]) -> SimpleNamespace:
    sample = SimpleNamespace(prompt_ids=[1], completion_ids=tokens, logprobs=[-1.0] * len(tokens), temperature=1.0,
                             vision_inputs={})
    return SimpleNamespace(index=index, samples=[sample])


def test_build_samples_gives_each_call_its_turns_advantage_and_counts_mismatches():
    from synth_ai.backend.trainers.rl.step import build_samples

    settings = SimpleNamespace(rubric_weights={"env": 1.0, "event": 0.0, "outcome": 0.0}, judge=None,
                               step_rewards=StepRewardSettings(True, "env_sparse"))
    a, b, c = member(0, 1.0, [1.0, 0.0]), member(1, 0.0, [0.0, 0.0]), member(2, 2.0, [1.0, 1.0])
    a.calls, b.calls = [_call(0, [5]), _call(1, [6])], [_call(0, [7]), _call(1, [8])]
    c.calls = [_call(0, [9])]  # one call for two steps: falls back to the episode's advantage
    samples, counts = build_samples([a, b, c], settings)
    # turn 0 returns [1, 0, 2] (mean 1, std sqrt(2/3)); turn 1 returns [0, 0, 1] (mean 1/3, std sqrt(2)/3)
    s0, s1 = math.sqrt(2 / 3), math.sqrt(2) / 3
    by_token = {s.completion_ids[0]: s.advantage for s in samples}
    assert by_token[5] == pytest.approx(0.0) and by_token[7] == pytest.approx(-1 / (s0 + EPS))
    assert by_token[6] == pytest.approx(-(1 / 3) / (s1 + EPS)) and by_token[8] == by_token[6]
    assert by_token[9] == pytest.approx(1 / (s0 + EPS))
    assert counts["turns_unmatched"] == 1 and [a.reward, b.reward, c.reward] == [1.0, 0.0, 2.0]


def test_read_rewards_keeps_the_answer_only_for_a_judge():
    doc = crafter_like([(1, 1)], rewards=[1.0])
    settings = SimpleNamespace(rubric_weights={"env": 1.0, "event": 0.0, "outcome": 0.5}, judge=None,
                               step_rewards=StepRewardSettings(True, "decision_stepwise"))
    rollout = Rollout(seed=0, index=0, cid="c")
    read_rewards(rollout, doc, settings)
    assert (rollout.reward, rollout.step_rewards, rollout.response) == (1.0 + 2.5, [1.0], None)
    read_rewards(rollout, doc, SimpleNamespace(**{**vars(settings), "judge": object()}))
    assert rollout.response is doc
    assert "turn 0" in transcript(doc) and "decision_rewards" not in transcript(doc)  # meta is left out
    doc["trajectories"][0]["steps"][0]["obs"]["image"] = "data:image/png;base64," + "A" * 5000
    assert '"image": "<image>"' in transcript(doc) and "AAAA" not in transcript(doc)


JUDGE = {"judge": {"timeout_s": 5, "options": {"provider": "groq", "model": "llama-judge", "event": False}}}


def test_judge_settings_defaults_overrides_and_errors():
    settings = resolve_judge(JUDGE)
    assert settings.url == "https://api.groq.com/openai/v1/chat/completions" and settings.key_env == "GROQ_API_KEY"
    assert settings.kinds == ("outcome",) and settings.blend == {"env": 1.0, "outcome": 1.0, "event": 0.0}
    assert settings.key_required and settings.timeout_s == 5.0
    local = resolve_judge({**JUDGE, "services": {"judge_url": "http://127.0.0.1:9/v1"},
                           "judge": {**JUDGE["judge"], "rubric": {"outcome": "Did it finish?"}}})
    assert local.url == "http://127.0.0.1:9/v1" and not local.key_required
    assert local.rubrics == {"outcome": "Did it finish?"}
    # rubric per kind: configured, else the task app's /info one, else the default wording
    both = resolve_judge({"judge": {"rubric": {"events": {"criteria": "one unlock per turn"}}, "options": {
        "provider": "openai", "model": "m", "rubric_overrides": "Be fair."}}})
    assert both.rubrics == {"outcome": "Be fair.", "event": "Be fair."}
    judge = Judge(resolve_judge({"judge": {"rubric": {"events": "Each step?"}, "options": {"provider": "openai",
                                                                                           "model": "m"}}}),
                  environ={}, task_rubrics={"outcome": "Win.", "event": "App events."})
    assert judge.rubrics["outcome"] == "Win." and judge.rubrics["event"] == "Each step?"
    assert judge.rubric_source == {"outcome": "task_app", "event": "config"}
    assert resolve_judge({"judge": {**JUDGE["judge"], "enabled": False}}) is None
    with pytest.raises(InvalidInputError, match=r"reward_blend\].event is 0.5 but event judging is off"):
        resolve_judge({"judge": {**JUDGE["judge"], "reward_blend": {"event": 0.5}}})
    with pytest.raises(InvalidInputError, match="provider must be one of openai, groq, gemini"):
        resolve_judge({"judge": {"options": {"provider": "anthropic", "model": "m"}}})


def test_a_missing_key_is_refused_naming_the_variable_and_the_key_never_echoed():
    with pytest.raises(InvalidInputError) as caught:
        require_judge_key(JUDGE, environ={})
    assert "GROQ_API_KEY is not set in the backend's environment" in caught.value.message
    assert "base_url" in caught.value.hint
    assert require_judge_key(JUDGE, environ={"GROQ_API_KEY": "gsk_judge_key_123456"}).model == "llama-judge"
    overridden = {**JUDGE, "services": {"judge_url": "http://127.0.0.1:9/v1"}}
    assert require_judge_key(overridden, environ={}) is not None  # a self-hosted judge needs no provider key


@pytest.mark.parametrize(("text", "score"), [
    ('{"score": 0.75, "reason": "ok"}', 0.75), ('```json\n{"score": 1}\n```', 1.0), ("0.5", 0.5),
    ('<think>{"score": 0.1}</think>Verdict: {"reason": "x", "score": "0.3"}', 0.3),
    ('{"score": 7}', None), ("The agent did well.", None), ('{"score": NaN}', None), ("", None), (None, None),
    ('{"rating": 0.5}', None), ("{not json} 0.4", None),
])
def test_parse_score(text, score):
    assert parse_score(text) == score


def test_the_docs_example_validates_and_reads_as_documented(tmp_path):
    """The `[training.rewards]` + `[judge]` example in docs/rl.md, added to an RL example config."""
    import re

    from conftest import REPO_ROOT

    from synth_ai.config.common import ResolveContext
    from synth_ai.config.loader import load_config

    docs = (REPO_ROOT / "docs" / "rl.md").read_text()
    snippet = re.search(r"```toml\n(\[training\.rewards\].*?)```", docs, re.DOTALL).group(1)
    path = tmp_path / "rl.toml"
    path.write_text((REPO_ROOT / "examples/configs/rl_text_qwen3_4b.toml").read_text() + "\n" + snippet)
    config = load_config(path, None, ResolveContext(environ={})).resolved
    steps = resolve_step_rewards(config["training"])
    assert (steps.active, steps.mode, steps.kind, steps.indicator_lambda) == (True, "decision_stepwise", "unique", 0.5)
    judge = resolve_judge(config)
    assert (judge.provider, judge.kinds, judge.blend) == ("groq", ("outcome",), {"env": 1.0, "outcome": 0.5,
                                                                                 "event": 0.0})
