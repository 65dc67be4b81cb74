"""The update's shared-prompt forward (`trainers/rl/shared_prompts.py`): samples that share a prompt run it once,
and the log-probs and gradients equal the one-row-per-sample forward's (up to float rounding), with prompts of
different lengths (left padding), completions of different lengths (right padding) and forced tokens."""

from __future__ import annotations

import random
from typing import Any

import pytest

from synth_ai.backend.store.model_store import ModelStore

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoModelForCausalLM

    folder = ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data").resolve("synth-ai/tiny-qwen3")
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()


def _samples(groups: int, per_group: int) -> list[Any]:
    from synth_ai.backend.trainers.rl.types import Sample

    rng = random.Random(3)
    prompts = [[rng.randrange(5, 1000) for _ in range(length)] for length in (9, 14, 3, 11)[:groups]]
    samples = []
    for i in range(groups * per_group):
        completion = [rng.randrange(5, 1000) for _ in range(rng.randrange(1, 8))]
        forced = [j == 1 for j in range(len(completion))]  # a forced token: context, no loss
        samples.append(Sample(prompt_ids=prompts[i % groups], completion_ids=completion,
                              old_logprobs=[-1.0] * len(completion), advantage=rng.uniform(-1, 1), seed=i % groups,
                              rollout_index=i, forced=forced))
    return samples


def _logprobs_and_grads(model: Any, batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from synth_ai.backend.ml.loading import core_parts
    from synth_ai.backend.trainers.rl.batches import completion_logprobs

    decoder, lm_head = core_parts(model)
    model.zero_grad(set_to_none=True)
    logp = completion_logprobs(decoder, lm_head, batch)
    (logp * batch["advantages"][:, None]).sum().backward()
    return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_shared_prompt_forward_matches_one_row_per_sample(model: Any) -> None:
    from synth_ai.backend.trainers.rl.batches import collate

    samples = _samples(groups=4, per_group=4)
    shared = collate(samples, 0, "cpu")
    assert shared["prefix_ids"].shape == (4, 14)  # each distinct prompt once, left-padded to the longest
    plain = collate(samples, 0, "cpu", share_prompts=False)
    assert "prefix_ids" not in plain and "input_ids" not in shared  # each layout carries only its own rows
    got, got_grads = _logprobs_and_grads(model, shared)
    want, want_grads = _logprobs_and_grads(model, plain)
    trained = shared["mask"] > 0
    assert not bool(trained.all()) and bool((got[~trained] == 0).all())  # forced and padded positions carry nothing
    assert torch.allclose(got[trained], want[trained], atol=1e-5, rtol=0)
    assert got_grads.keys() == want_grads.keys() and len(got_grads) > 0
    for name, grad in want_grads.items():
        assert not bool(torch.isnan(got_grads[name]).any()), name
        assert torch.allclose(got_grads[name], grad, atol=1e-5 * float(grad.abs().max()) + 1e-7), name


def test_prompts_that_never_repeat_keep_the_plain_layout() -> None:
    from synth_ai.backend.trainers.rl.batches import collate

    assert "prefix_ids" not in collate(_samples(groups=4, per_group=1), 0, "cpu")
    with_images = _samples(groups=2, per_group=2)
    with_images[0].vision_inputs = {"pixel_values": torch.zeros(1, 4)}
    from synth_ai.backend.trainers.rl.shared_prompts import shared_layout

    assert shared_layout(with_images, 0) is None
