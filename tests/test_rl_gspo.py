"""GSPO maths against hand calculations, group advantages and reward accounting, and the token/log-prob
bookkeeping of the policy server for multi-turn episodes with tool calls and thinking tokens."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest

from synth_ai.backend.trainers.rl.advantages import InvalidRollout, episode_reward, group_advantages, reward_parts
from synth_ai.backend.trainers.rl.types import Rollout

torch = pytest.importorskip("torch")


# GSPO loss ----------------------------------------------------------------------------------------------------------
def _loss(logp, old, mask, adv, **kw):
    from synth_ai.backend.trainers.rl.gspo import gspo_loss

    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return gspo_loss(t(logp), t(old), t(mask), t(adv), **{"eps_low": 0.2, "eps_high": 0.3, **kw})


def test_on_policy_ratio_is_exactly_one_and_the_gradient_is_the_advantage_weighted_mean_logprob():
    from synth_ai.backend.trainers.rl.gspo import gspo_loss

    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, 0.0]], dtype=torch.float64, requires_grad=True)
    old = logp.detach().clone()
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([1.5, -0.5], dtype=torch.float64)
    loss, stats = gspo_loss(logp, old, mask, adv, eps_low=3e-4, eps_high=4e-4)
    assert stats.ratio_sum == 2.0 and stats.clipped == 0 and stats.kl_sum == 0.0
    assert float(loss.detach()) == pytest.approx(-(1.5 - 0.5))  # -sum(s_i * A_i) with s_i = 1
    loss.backward()
    # d/dlogp of -A_i * exp(mean) at ratio 1 = -A_i / n_i on each completion token, 0 on padding
    expected = torch.tensor([[-0.5, -0.5, -0.5], [0.25, 0.25, 0.0]], dtype=torch.float64)
    assert torch.allclose(logp.grad, expected)


def test_sequence_ratio_is_length_normalised_and_clipped_by_hand():
    # row 0: mean log-ratio = (0.2 + 0.4) / 2 = 0.3 -> s = e^0.3 = 1.3499 > 1 + 0.3: clipped to 1.3 (A > 0)
    # row 1: mean log-ratio = -0.5 -> s = e^-0.5 = 0.6065 < 1 - 0.2; A < 0: min(s*A, 0.8*A) = 0.8*A... = -0.8*-1
    loss, stats = _loss([[-0.8, -0.6, -9.0], [-1.5, -5.0, -5.0]], [[-1.0, -1.0, 0.0], [-1.0, -5.0, -5.0]],
                        [[1, 1, 0], [1, 0, 0]], [2.0, -1.0])
    s0, s1 = math.exp(0.3), math.exp(-0.5)
    row0 = -min(s0 * 2.0, 1.3 * 2.0)
    row1 = -min(s1 * -1.0, 0.8 * -1.0)
    assert float(loss) == pytest.approx(row0 + row1)
    assert stats.clipped == 2 and stats.ratio_sum == pytest.approx(s0 + s1)


def test_unclipped_side_keeps_the_ratio():
    # A > 0 and s below 1 - eps: min(s*A, clip*A) = s*A (the pessimistic side is the ratio itself)
    loss, _ = _loss([[-2.0]], [[-1.0]], [[1]], [1.0])
    assert float(loss) == pytest.approx(-math.exp(-1.0))


def test_reference_kl_term_is_k3_averaged_over_the_sequence():
    loss, stats = _loss([[-1.0, -1.0]], [[-1.0, -1.0]], [[1, 1]], [0.0], ref_logp=torch.tensor(
        [[-1.5, -0.5]], dtype=torch.float64), kl_coef=0.1)
    k3 = lambda d: math.exp(d) - d - 1  # noqa: E731
    expected = 0.1 * (k3(-0.5) + k3(0.5)) / 2
    assert float(loss) == pytest.approx(expected)
    assert stats.ref_kl_sum == pytest.approx(expected / 0.1)


# Advantages and rewards ---------------------------------------------------------------------------------------------
def test_group_advantages_by_hand_and_zero_variance_groups_give_none():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert adv == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-3)  # mean .5, std .5
    assert group_advantages([0.2, 0.2, 0.2]) is None
    assert group_advantages([1.0]) is None


def test_reward_parts_and_rubric_weights():
    response = {"trajectories": [{"steps": [{"reward": 0.25}, {"reward": 0.5}], "final": {"reward": 1.0}}],
                "metrics": {"mean_return": 0.75, "outcome_score": 1.0}}
    assert reward_parts(response) == {"env": 0.75, "event": 0.75, "outcome": 1.0}
    assert episode_reward(response, {"env": 0.5, "event": 0.0, "outcome": 2.0}) == pytest.approx(2.375)
    steps_only = {"trajectories": [{"steps": [{"reward": 0.5}, {"reward": 0.25}]}]}
    assert reward_parts(steps_only)["env"] == 0.75
    for garbage in (["not", "a", "dict"], {"hello": "world"}, {"metrics": {"mean_return": "high"}},
                    {"trajectories": ["x"]}):
        with pytest.raises(InvalidRollout):
            reward_parts(garbage)


def _call(cid: str, index: int, completion: list[int]):
    from synth_ai.backend.inference.engine import SampledTokens
    from synth_ai.backend.inference.policy_server import RecordedCall

    return RecordedCall(cid, index, {}, [SampledTokens([1, 2], completion, [-0.1] * len(completion), 1.0)])


def test_build_samples_skips_zero_variance_groups_and_leaves_out_failed_rollouts():
    from synth_ai.backend.trainers.rl.step import build_samples

    def rollout(seed: int, index: int, reward: float | None, error: str | None = None) -> Rollout:
        return Rollout(seed=seed, index=index, cid=f"c{seed}{index}", reward=reward, error=error,
                       calls=[_call(f"c{seed}{index}", 0, [5, 6]), _call(f"c{seed}{index}", 1, [7])])

    rollouts = [rollout(0, 0, 1.0), rollout(0, 1, 0.0), rollout(0, 2, None, "timeout"),  # error: not a 0
                rollout(1, 0, 0.5), rollout(1, 1, 0.5)]  # zero variance: skipped
    samples, counts = build_samples(rollouts)
    assert counts == {"groups": 2, "groups_zero_variance": 1, "samples": 4}
    assert [(s.seed, s.rollout_index, s.turn) for s in samples] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
    # the failed rollout is not in the group: advantages come from [1.0, 0.0] only (+1 / -1), not [1, 0, 0]
    assert [round(s.advantage, 3) for s in samples] == [1.0, 1.0, -1.0, -1.0]


# Bookkeeping through the policy server ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory):
    from synth_ai.backend.inference.engine import describe_model
    from synth_ai.backend.inference.policy_server import LocalPolicyServer
    from synth_ai.backend.ml import loading
    from synth_ai.backend.store.model_store import ModelStore

    store = ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")
    path = store.resolve("synth-ai/tiny-qwen3")
    loading.configure_threads(tiny=True)
    model = loading.load_model(path, loading.Placement("cpu", torch.float32)).eval()
    tokenizer = loading.load_tokenizer(path)
    server = LocalPolicyServer(describe_model("policy", Path(path), model, tokenizer, vision=False), seed=7,
                               cid_prefix="job-")
    url = server.start()
    yield server, url, model, tokenizer
    server.stop()


ADD_TOOL = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


def test_multi_turn_calls_with_tools_and_thinking_are_recorded_token_for_token(policy):
    from synth_ai.backend.trainers.rl.batches import collate, completion_logprobs
    from synth_ai.backend.trainers.rl.gspo import gspo_loss
    from synth_ai.backend.trainers.rl.step import build_samples
    from synth_ai.backend.ml import loading

    server, url, model, tokenizer = policy
    cid = "job-it0-s0-g0"
    first = [{"role": "user", "content": "Use the tool to add 2 and 3."}]
    turn1 = httpx.post(f"{url}?cid={cid}", json={"model": "anything", "messages": first, "tools": [ADD_TOOL],
                                                  "max_tokens": 10, "temperature": 1.0,
                                                  "thinking_mode": "think"}, timeout=60).json()
    second = first + [{"role": "assistant", "content": turn1["choices"][0]["message"].get("content") or "",
                       "tool_calls": [{"id": "call_1", "type": "function",
                                       "function": {"name": "add", "arguments": json.dumps({"a": 2, "b": 3})}}]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    turn2 = httpx.post(f"{url}?cid={cid}", json={"model": "anything", "messages": second, "tools": [ADD_TOOL],
                                                  "max_tokens": 8, "temperature": 0.7}, timeout=60).json()
    assert turn1["model"] == turn2["model"] == "anything"
    calls = server.take_calls(cid)
    assert [c.index for c in calls] == [0, 1] and server.take_calls(cid) == []
    think_open = loading.special_token_id(tokenizer, "<think>")
    one, two = calls[0].samples[0], calls[1].samples[0]
    # the prompt as the model saw it: the think block is opened in the prompt, the thinking itself is sampled
    assert think_open is not None and think_open in one.prompt_ids[-3:]
    assert len(one.completion_ids) == len(one.logprobs) and 1 <= len(one.completion_ids) <= 10
    assert two.temperature == 0.7 and len(two.completion_ids) <= 8 + 1
    # the second turn's prompt holds the tool call and the tool result, rendered by the chat template
    rendered = tokenizer.decode(two.prompt_ids)
    assert "<tool_call>" in rendered and "<tool_response>" in rendered and "5" in rendered

    # Training recomputes exactly the recorded log-probs (same temperature): every ratio is 1.
    rollouts = [Rollout(seed=0, index=0, cid=cid, reward=1.0, calls=calls),
                Rollout(seed=0, index=1, cid="other", reward=0.0, calls=calls)]
    samples, _ = build_samples(rollouts)
    decoder, lm_head = loading.core_parts(model)
    batch = collate(samples, tokenizer.pad_token_id or 0, "cpu")
    with torch.no_grad():
        logp = completion_logprobs(decoder, lm_head, batch)
    recorded = batch["old_logprobs"]
    assert torch.allclose(logp * batch["mask"], recorded * batch["mask"], atol=2e-4)
    _, stats = gspo_loss(logp, recorded, batch["mask"], batch["advantages"], eps_low=3e-4, eps_high=4e-4)
    assert stats.clipped == 0 and stats.ratio_sum == pytest.approx(len(samples), abs=1e-3)


def test_the_same_cid_samples_the_same_tokens_whatever_the_order(policy):
    server, url, _model, _tok = policy
    body = {"model": "m", "messages": [{"role": "user", "content": "What color is the sky?"}], "max_tokens": 8}

    def sample(engine, engine_url: str, cid: str) -> list[int]:
        httpx.post(f"{engine_url}?cid={cid}", json=body, timeout=60).raise_for_status()
        return engine.take_calls(cid)[0].samples[0].completion_ids

    first = sample(server, url, "job-it3-s1-g0")
    sample(server, url, "job-it3-s1-g1")
    again = type(server)(server.served, seed=7, cid_prefix="job-")  # the same job, calls in another order
    prefixed = type(server)(server.served, seed=7, cid_prefix="other-job-")  # same seed, another job
    try:
        again_url, other_url = again.start(), prefixed.start()
        sample(again, again_url, "job-it3-s1-g1")
        assert sample(again, again_url, "job-it3-s1-g0") == first
        assert sample(prefixed, other_url, "other-job-it3-s1-g0") == first  # a job's id does not change seeds
    finally:
        again.stop()
        prefixed.stop()


def test_calls_arriving_after_their_cid_was_taken_are_answered_but_not_kept(policy):
    """A timed-out attempt's task app may go on calling the policy after the trainer took (settled) its cid."""
    server, url, _model, _tok = policy
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    assert server.take_calls("job-late") == []  # the attempt timed out before any call came
    answer = httpx.post(f"{url}?cid=job-late", json=body, timeout=60)
    assert answer.status_code == 200 and answer.json()["choices"]
    assert "job-late" not in server._calls and server.take_calls("job-late") == []


def test_policy_server_drops_the_oldest_images_beyond_the_limit():
    from synth_ai.backend.inference.policy_server import _keep_last_images

    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    messages = [{"role": "user", "content": [image, {"type": "text", "text": "a"}]},
                {"role": "user", "content": [image, image, {"type": "text", "text": "b"}]}]
    kept, dropped = _keep_last_images(messages, 1)
    assert dropped == 2
    assert kept[0]["content"] == [{"type": "text", "text": "a"}]
    assert kept[1]["content"] == [image, {"type": "text", "text": "b"}]


def _filtered_and_forced_samples(server, url, cid: str):
    """Samples of one call drawn with top-p 0.8, top-k 5 and a thinking budget of 2 (so `</think>` is forced)."""
    from synth_ai.backend.trainers.rl.step import build_samples

    body = {"model": "m", "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8, "n": 2,
            "temperature": 0.9, "top_p": 0.8, "top_k": 5, "thinking_mode": "think", "thinking_budget": 2}
    httpx.post(f"{url}?cid={cid}", json=body, timeout=60).raise_for_status()
    calls = server.take_calls(cid)
    rollouts = [Rollout(seed=0, index=0, cid=cid, reward=1.0, calls=calls),
                Rollout(seed=0, index=1, cid="other", reward=0.0, calls=calls)]
    return build_samples(rollouts)[0]


def _check_on_policy_and_forced_tokens_untrained(samples, model, tokenizer):
    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.rl.batches import collate, completion_logprobs
    from synth_ai.backend.trainers.rl.gspo import gspo_loss

    close = loading.special_token_id(tokenizer, "</think>")
    # the budget counts the prompt's "\n" after `<think>`: one thinking token is sampled, then `</think>` is forced
    # (recorded as forced, kept in the sequence as context)
    for s in samples:
        assert s.completion_ids[1] == close and s.forced[:2] == [False, True] and not any(s.forced[2:])
    decoder, lm_head = loading.core_parts(model)
    batch = collate(samples, tokenizer.pad_token_id or 0, "cpu")
    assert batch["mask"][:, 1].sum() == 0 and batch["mask"][:, 2].all()
    # the forced token is in every row's trained sequence (the completions' own columns when rows share a prompt)
    sequences = batch["completion_ids"] if "prefix_ids" in batch else batch["input_ids"]
    assert sequences.eq(close).any(dim=1).all()
    logp = completion_logprobs(decoder, lm_head, batch)
    # the recorded log-probs are what training computes (temperature only, no top-p/top-k filter) ...
    assert torch.allclose(logp.detach() * batch["mask"], batch["old_logprobs"] * batch["mask"], atol=2e-5)
    loss, stats = gspo_loss(logp, batch["old_logprobs"], batch["mask"], batch["advantages"], eps_low=3e-4,
                            eps_high=4e-4)
    # ... so the first update's ratio is exactly 1 and nothing is clipped
    assert stats.clipped == 0 and stats.ratio_sum == pytest.approx(len(samples), abs=1e-4)
    logp.retain_grad()
    loss.backward()
    assert torch.all(logp.grad[:, 1] == 0) and torch.all(logp.grad[:, 0] != 0)  # forced tokens: no loss


def test_top_p_top_k_and_a_forced_think_close_keep_the_first_update_on_policy(policy):
    server, url, model, tokenizer = policy
    _check_on_policy_and_forced_tokens_untrained(_filtered_and_forced_samples(server, url, "job-topp"), model,
                                                 tokenizer)


def test_the_one_generate_path_records_the_same_log_probs_and_forced_tokens(policy):
    """Images and vision models sample through `generation.generate` (not the running batch): same bookkeeping."""
    from synth_ai.backend.inference import generation
    from synth_ai.backend.trainers.rl.types import Sample

    server, url, model, tokenizer = policy
    batched = _filtered_and_forced_samples(server, url, "job-topp-alone")
    params = {"tools": None, "tool_choice": "none", "thinking_mode": "think", "thinking_budget": 2, "seed": 11,
              "n": 2, "max_tokens": 8, "temperature": 0.9, "top_p": 0.8, "top_k": 5}
    encoded = generation.encode(server.served, params, [{"role": "user", "content": "Name a colour."}], [])
    rows = generation.rows_for(0, params)
    generation.generate(server.served, [encoded], rows)
    samples = [Sample(prompt_ids=encoded.prompt_ids, completion_ids=row.tokens, old_logprobs=row.logprobs,
                      advantage=adv, temperature=0.9, forced=row.forced) for row, adv in zip(rows, (1.0, -1.0))]
    assert samples[0].prompt_ids == batched[0].prompt_ids
    _check_on_policy_and_forced_tokens_untrained(samples, model, tokenizer)
