"""Sections shared by more than one config kind, and the context a config is resolved in."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from synth_ai.config.fields import (
    SECTION,
    FiniteFloat,
    NonEmptyStr,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Ratio,
    StringList,
)

ThinkingMode = Literal["think", "no_think"]

# (type, method, variety) combinations each command accepts.
RL_ALGORITHMS: tuple[tuple[str, str, str], ...] = (("online", "policy_gradient", "gspo"),)
SFT_ALGORITHMS: tuple[tuple[str, str, str], ...] = (
    ("offline", "supervised_finetune", "fft"),
    ("offline", "sft", "fft"),
    ("offline", "sft", "lora"),
)


@dataclass
class ResolveContext:
    """What besides the file decides the resolved config: flags and environment."""

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    allow_experimental: bool | None = None  # --allow-experimental / --no-allow-experimental; None = env decides
    task_url: str | None = None  # --task-url
    model: str | None = None  # --model
    dataset: str | None = None  # --dataset
    require_dataset: bool = False  # train needs the dataset to exist; `config validate` only warns


class AlgorithmSection(BaseModel):
    model_config = SECTION
    type: NonEmptyStr
    method: NonEmptyStr
    variety: NonEmptyStr


class TopologySection(BaseModel):
    model_config = SECTION
    type: str | None = None
    gpus_for_vllm: NonNegativeInt | None = None
    gpus_for_training: NonNegativeInt | None = None
    gpus_for_ref: NonNegativeInt | None = None
    tensor_parallel: PositiveInt | None = None
    reference_placement: str | None = None
    # issue 39 item 2, the split topology: rollouts in a separate inference process (also on a CPU)
    separate_inference: bool | None = None


class ComputeSection(BaseModel):
    model_config = SECTION
    gpu_type: NonEmptyStr
    gpu_count: PositiveInt
    nodes: PositiveInt | None = None
    topology: TopologySection | None = None


class LoraSection(BaseModel):
    model_config = SECTION
    r: PositiveInt | None = None
    alpha: PositiveFloat | None = None
    dropout: Ratio | None = None
    target_modules: StringList | None = None
    # other spellings the embedded backend's SFT trainer reads (r, alpha, dropout win when both are set)
    rank: PositiveInt | None = None
    lora_alpha: PositiveFloat | None = None
    lora_dropout: Ratio | None = None


class PolicySection(BaseModel):
    """The newer `[policy]` table (an alternative to `[model]` in RL configs)."""

    model_config = SECTION
    model_name: str | None = None
    source: str | None = None
    max_tokens: PositiveInt = 512
    temperature: FiniteFloat = 0.7
    top_p: Ratio = 0.95
    top_k: PositiveInt | None = None
    repetition_penalty: PositiveFloat = 1.0
    stop_sequences: StringList | None = None
    trainer_mode: NonEmptyStr
    label: NonEmptyStr
    inference_url: str | None = None


class PolicyRuntimeSection(BaseModel):
    """Per-rollout policy settings (`[rollout.policy_config]`, eval `policy_config`). The table goes to the task
    app's policy, which may read keys of its own (0.2.17 typed it as a plain table): a key like none of these is
    sent as written, while one that looks like one of them is refused as a typo (`diagnostics.check_unknown_keys`)."""

    model_config = SECTION
    takes_other_keys: ClassVar[bool] = True
    model: str | None = None
    inference_url: str | None = None
    temperature: FiniteFloat | None = None
    top_p: Ratio | None = None
    top_k: PositiveInt | None = None
    max_tokens: PositiveInt | None = None
    max_llm_calls: PositiveInt | None = None
    thinking_mode: ThinkingMode | None = None
    thinking_budget: PositiveInt | None = None
    use_vision: bool | None = None
    image_only_mode: bool | None = None
    max_images_per_message: PositiveInt | None = None


def algorithm_label(algorithm: Mapping[str, Any]) -> str:
    return "/".join(str(algorithm.get(k, "?")) for k in ("type", "method", "variety"))


def algorithm_complete(algorithm: Mapping[str, Any]) -> bool:
    """All of type/method/variety are non-empty strings (otherwise the schema pass has reported what is wrong)."""
    return all(isinstance(algorithm.get(k), str) and algorithm[k].strip() for k in ("type", "method", "variety"))


def algorithm_combo(algorithm: Mapping[str, Any]) -> tuple[str, str, str]:
    return tuple(str(algorithm.get(k, "")).strip().lower() for k in ("type", "method", "variety"))  # type: ignore[return-value]


def describe_combos(combos: tuple[tuple[str, str, str], ...]) -> str:
    return "; ".join(f"type='{t}', method='{m}', variety='{v}'" for t, m, v in combos)


def table(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A sub-table, or {} when absent or of the wrong type (wrong types are reported by the schema pass)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}
