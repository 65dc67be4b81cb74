"""`[training]` mini-batches and gradient accumulation of the GSPO update (`GSPOTrainer.train`), on the tiny Qwen3:
the number of optimiser steps, and that a step's gradient is the same whether its samples run in one forward or
in several accumulated micro-batches."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from backend_support import link_tiny
from rl_support import rl_body

torch = pytest.importorskip("torch")


def _trainer(tmp_path: Path, tiny_text_models: list[Path], **training):
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl.rl_settings import resolve_rl_settings
    from synth_ai.backend.trainers.rl.step import GSPOTrainer

    link_tiny(tmp_path / "store", tiny_text_models)
    spec = {"job_id": "rljob_mb", **rl_body("http://127.0.0.1:9", **training)}
    return GSPOTrainer(resolve_rl_settings(spec), ModelStore(tmp_path / "store"), tmp_path / "work")


def _samples(trainer, count: int):
    """`count` sequences of various lengths with on-policy old log-probs and advantages of both signs."""
    from synth_ai.backend.trainers.rl.batches import collate, completion_logprobs
    from synth_ai.backend.trainers.rl.types import Sample

    rng = random.Random(5)
    samples = [Sample(prompt_ids=[rng.randrange(900) for _ in range(rng.randint(3, 7))],
                      completion_ids=[rng.randrange(900) for _ in range(rng.randint(2, 6))], old_logprobs=[0.0] * 6,
                      advantage=rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.5)) for _ in range(count)]
    with torch.no_grad():
        for sample in samples:
            logp = completion_logprobs(trainer.decoder, trainer.lm_head, collate([sample], trainer.pad_id, "cpu"))
            sample.old_logprobs = logp[0, :len(sample.completion_ids)].tolist()
    return samples


def _gradients_per_step(trainer, samples) -> list[dict[str, object]]:
    """The gradient each optimiser step applies (the step itself is skipped, so the weights stay put)."""
    taken: list[dict[str, object]] = []

    def record() -> None:
        taken.append({name: p.grad.detach().clone() for name, p in trainer.trainable.items() if p.grad is not None})

    trainer.optimizer.step = record
    stats = trainer.train(samples)
    assert stats.steps == len(taken) and stats.sequences == len(samples)
    return taken


def test_micro_batches_accumulate_into_the_same_step_gradient(tmp_path: Path, tiny_text_models: list[Path]):
    # 2 samples per forward x 2 accumulation steps = 4 samples per optimiser step: 10 samples -> 3 steps (4, 4, 2)
    accumulated = _trainer(tmp_path, tiny_text_models, max_accumulated_minibatch=2,
                           gradient_accumulation_steps=2, max_grad_norm=0.0)
    samples = _samples(accumulated, 10)
    steps = _gradients_per_step(accumulated, samples)
    assert len(steps) == 3

    # the same steps, each as one forward over its samples: the same gradients (the weights never moved)
    accumulated.settings = dataclasses.replace(accumulated.settings, micro_batch=4, gradient_accumulation_steps=1)
    one_forward = _gradients_per_step(accumulated, samples)
    assert len(one_forward) == 3
    for micro, single in zip(steps, one_forward):
        assert micro.keys() == single.keys() and micro
        for name in micro:
            assert torch.allclose(micro[name], single[name], atol=1e-6, rtol=1e-4), name
    assert any(float(g.abs().sum()) > 0 for g in steps[0].values())

    # by default one optimiser step takes every sample of the iteration
    accumulated.settings = dataclasses.replace(accumulated.settings, micro_batch=None)
    assert len(_gradients_per_step(accumulated, samples)) == 1
