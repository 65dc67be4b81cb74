"""How an RL job's config becomes trainer settings where the config leaves a choice open: the image limit per policy
call defaults to the model's own (the product docs: "max_images_per_step defaults to the model limit (one image per
turn)") also for bodies that did not go through our config layer (the 0.2.17 client's), and a model the registry
does not know gets no limit. Rollouts in flight default to the whole iteration; the memory keys of issue 38
(`reference_device`, `optimizer_states`) default and are read."""

from __future__ import annotations

from typing import Any

import pytest

from synth_ai.backend.trainers.rl.rl_settings import resolve_rl_settings
from synth_ai.errors import InvalidInputError


def _spec(model: str, **rollout: Any) -> dict[str, Any]:
    return {"job_id": "rljob_settings", "data": {"endpoint_base_url": "http://127.0.0.1:8102", "base_model": model,
                                                 "config": {"model": {"base": model, "trainer_mode": "lora"},
                                                            "rollout": {"max_turns": 1, **rollout},
                                                            "training": {"batch_size": 1, "group_size": 2}}}}


@pytest.mark.parametrize(("model", "rollout", "limit"), [
    ("Qwen/Qwen3-VL-4B-Instruct", {"use_vision": True}, 1),
    ("synth-ai/tiny-qwen3-vl", {}, 1),
    ("rl:synth-ai/tiny-qwen3-vl:rljob_abc", {}, 1),  # a fine-tune keeps its base's limit
    ("Qwen/Qwen3-VL-4B-Instruct", {"max_images_per_step": 3}, 3),
    ("Qwen/Qwen3-4B", {}, None),
    ("/models/my-own-vl", {}, None),
])
def test_max_images_per_step_defaults_to_the_models_limit(model: str, rollout: dict[str, Any], limit: int | None):
    assert resolve_rl_settings(_spec(model, **rollout)).max_images_per_step == limit


@pytest.mark.parametrize("value", [0, -1])
def test_an_image_limit_below_one_is_refused_with_its_key(value: int):
    with pytest.raises(InvalidInputError, match=r"\[rollout\]\.max_images_per_step"):  # was: 0 read as "unset"
        resolve_rl_settings(_spec("Qwen/Qwen3-VL-4B-Instruct", max_images_per_step=value))


@pytest.mark.parametrize(("rollout", "training", "concurrency"), [
    ({}, {}, 2),  # batch 1 x group 2: the whole iteration in flight (it was 4, more than such a batch has)
    ({}, {"batch_size": 4, "group_size": 8}, 32),  # was 4: a quarter of the engine's running batch
    ({}, {"batch_size": 32, "group_size": 16}, 64),  # capped: 512 calls would overflow the engine's queue
    ({"max_concurrent_rollouts": 3}, {"batch_size": 4, "group_size": 8}, 3),
    ({}, {"batch_size": 4, "group_size": 8, "async_semaphore_max": 5}, 5),
])
def test_rollouts_in_flight_default_to_the_whole_iteration(rollout: dict[str, Any], training: dict[str, Any],
                                                          concurrency: int):
    spec = _spec("Qwen/Qwen3-4B", **rollout)
    spec["data"]["config"]["training"].update(training)
    assert resolve_rl_settings(spec).concurrency == concurrency


def test_the_memory_keys_default_and_are_read():
    spec = _spec("Qwen/Qwen3-4B")
    settings = resolve_rl_settings(spec)
    assert (settings.reference_device, settings.optimizer_states) == ("auto", "fp32")
    spec["data"]["config"]["training"].update(reference_device="cpu", optimizer_states="8bit")
    settings = resolve_rl_settings(spec)
    assert (settings.reference_device, settings.optimizer_states) == ("cpu", "8bit")
    spec["data"]["config"]["training"]["optimizer_states"] = "16bit"
    with pytest.raises(InvalidInputError, match=r"\[training\]\.optimizer_states must be 'fp32', '8bit' or "):
        resolve_rl_settings(spec)
