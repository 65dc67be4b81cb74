"""How an RL job's config becomes trainer settings where the config leaves a choice open: the image limit per policy
call defaults to the model's own (the product docs: "max_images_per_step defaults to the model limit (one image per
turn)") also for bodies that did not go through our config layer (the 0.2.17 client's), and a model the registry
does not know gets no limit."""

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
