"""The Tinker losses' values and gradients against the SDK's documented definitions, written out per token here:
each loss's gradient with respect to the current log-probs is what its formula says (with the documented
stop-gradients), its clip bounds are ratios with the documented defaults, and config and per-token inputs
override them in that order."""

from __future__ import annotations

import math

import pytest
import torch

from synth_ai.backend.trainers.tinker.losses import token_losses
from synth_ai.config.tinker_settings import check_datum, check_loss
from synth_ai.errors import InvalidInputError

SAMPLED = [-1.0, -0.5, -2.0, 0.0]
ADVANTAGES = [1.0, -1.0, 0.5, 0.0]
CURRENT = [-0.2, -1.5, -2.1, -0.3]  # ratios exp(0.8), exp(-1.0), exp(-0.1), exp(-0.3)


def _inputs(**extra):
    columns = {"logprobs": SAMPLED, "advantages": ADVANTAGES, **extra}
    return {name: {"values": list(values), "shape": [len(values)]} for name, values in columns.items()}


def _run(loss_fn, config=None, **extra):
    lp = torch.tensor(CURRENT, requires_grad=True)
    losses = token_losses(loss_fn, lp, _inputs(**extra), config or {})
    losses.sum().backward()
    return losses.detach().tolist(), lp.grad.tolist()


def _ratios():
    return [math.exp(c - s) for c, s in zip(CURRENT, SAMPLED)]


def test_importance_sampling_weights_each_token_by_its_ratio():
    values, grads = _run("importance_sampling")
    for v, g, r, a in zip(values, grads, _ratios(), ADVANTAGES):
        assert v == pytest.approx(-r * a, rel=1e-6) and g == pytest.approx(-r * a, rel=1e-6)


def test_ppo_clips_the_ratio_at_its_default_bounds_and_at_configured_ones():
    values, grads = _run("ppo")
    ratios = _ratios()
    # token 0: r = 2.23 > 1.2 with A > 0, and token 1: r = 0.37 < 0.8 with A < 0: clipped, no gradient;
    # token 2: r = 0.90 inside the bounds: the plain ratio's term and gradient
    assert values[0] == pytest.approx(-1.2 * 1.0) and grads[0] == 0.0
    assert values[1] == pytest.approx(0.8) and grads[1] == 0.0
    assert values[2] == pytest.approx(-ratios[2] * 0.5) and grads[2] == pytest.approx(-ratios[2] * 0.5)
    wide, _ = _run("ppo", {"clip_high_threshold": 3.0})
    assert wide[0] == pytest.approx(-ratios[0])
    per_token, _ = _run("ppo", {"clip_high_threshold": 3.0}, clip_high_threshold=[1.1] * 4)
    assert per_token[0] == pytest.approx(-1.1)  # a per-token input wins over loss_fn_config


def test_cispo_stops_the_clipped_ratios_gradient():
    values, grads = _run("cispo", {"clip_high_threshold": 2.0})
    ratios = _ratios()
    clipped = [min(max(r, 0.0), 2.0) for r in ratios]
    for v, g, c, lp, a in zip(values, grads, clipped, CURRENT, ADVANTAGES):
        assert v == pytest.approx(-c * lp * a, rel=1e-6)
        assert g == pytest.approx(-c * a, rel=1e-6)  # d/dlp of -sg(c) * lp * A


def test_dro_penalises_the_squared_log_ratio():
    values, grads = _run("dro", {"beta": 0.5})
    for v, g, lp, q, a in zip(values, grads, CURRENT, SAMPLED, ADVANTAGES):
        assert v == pytest.approx(-(lp * a - 0.25 * (lp - q) ** 2), rel=1e-6)
        assert g == pytest.approx(-a + 0.5 * (lp - q), rel=1e-6)
    default, _ = _run("dro")
    assert default[0] == pytest.approx(-(CURRENT[0] * 1.0 - 0.025 * 0.8 ** 2), rel=1e-6)


def test_gspo_gives_every_token_the_sequence_ratio_with_its_own_gradient():
    mask = [1.0, 1.0, 1.0, 0.0]
    values, grads = _run("gspo", {"clip_low_threshold": 0.0, "clip_high_threshold": 10.0},
                         sequence_ratio_mask=mask)
    s = math.exp(sum(c - q for c, q, m in zip(CURRENT, SAMPLED, mask) if m) / 3)
    for v, g, a in zip(values, grads, ADVANTAGES):
        assert v == pytest.approx(-s * a, rel=1e-6) and g == pytest.approx(-s * a, rel=1e-6)
    # without a mask: the tokens with a sampler log-prob or an advantage (the last has neither)
    unmasked, _ = _run("gspo", {"clip_low_threshold": 0.0, "clip_high_threshold": 10.0})
    assert unmasked == pytest.approx(values, rel=1e-6)


def test_cross_entropy_scores_k_targets_per_position_with_their_weights():
    lp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
    weights = {"weights": {"values": [0.75, 0.25, 1.0, -1.0], "shape": [2, 2]}}
    losses = token_losses("cross_entropy", lp, weights, {})
    losses.sum().backward()
    assert losses.sum().item() == pytest.approx(0.75 + 0.5 + 0.5 - 3.0)
    assert lp.grad.tolist() == [[-0.75, -0.25], [-1.0, 1.0]]


def test_refused_losses_and_config_keys_say_why():
    with pytest.raises(InvalidInputError, match="stability information"):
        check_loss("stable_reinforce", {})
    with pytest.raises(InvalidInputError, match="forward_backward_custom"):
        check_loss("custom", {})
    with pytest.raises(InvalidInputError, match="beta.*not read by loss_fn 'ppo'"):
        check_loss("ppo", {"beta": 0.1})
    with pytest.raises(InvalidInputError, match="must be a number"):
        check_loss("dro", {"beta": "high"})
    check_loss("gspo", {"clip_low_threshold": 0.9})


def test_datum_shapes_are_checked_per_loss():
    datum = {"tokens": [1, 2], "inputs": {"target_tokens": {"values": [2, 3, 4, 5], "shape": [2, 2]},
                                          "weights": {"values": [1.0] * 4, "shape": [2, 2]}}}
    check_datum(datum, "cross_entropy", "data[0]")
    datum["inputs"]["weights"]["shape"] = [4]
    with pytest.raises(InvalidInputError, match="weights has 4 rows"):
        check_datum(datum, "cross_entropy", "data[0]")
    wide = {"tokens": [1, 2], "inputs": {"target_tokens": {"values": [2, 3, 4, 5], "shape": [2, 2]},
                                         "logprobs": {"values": [0.0] * 2, "shape": [2]},
                                         "advantages": {"values": [0.0] * 2, "shape": [2]}}}
    with pytest.raises(InvalidInputError, match="target_tokens has shape"):
        check_datum(wide, "ppo", "data[0]")
