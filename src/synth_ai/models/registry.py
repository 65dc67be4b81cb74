"""The model registry: which models can be trained, how, and with what modalities.

Holds every base model id the hosted Synth service accepted in synth-ai 0.2.17, with corrected metadata
(Qwen3-VL ids are text+image), plus the tiny local models the embedded backend builds for tests and demos.
Lookup is case-insensitive and returns canonical ids; fine-tuned ids (`ft:`, `fft:`, `qft:`, `rl:`) resolve to
their base. Pure data and logic: no heavy imports.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from synth_ai.errors import InvalidInputError

FINE_TUNED_PREFIXES: tuple[str, ...] = ("ft", "fft", "qft", "rl", "imported")  # imported: models from elsewhere

TEXT = ("text",)
TEXT_IMAGE = ("text", "image")


@dataclass(frozen=True)
class ModelInfo:
    id: str
    family: str
    provider: str
    modalities: tuple[str, ...]
    training_modes: tuple[str, ...]
    supports_thinking: bool = False
    lifecycle: str = "stable"  # "stable" | "experimental" | "local"
    max_images_per_message: int = 0  # 0 for text-only models
    architecture: str = "Qwen3ForCausalLM"
    parameters: str = ""
    notes: str = ""

    @property
    def supports_vision(self) -> bool:
        return "image" in self.modalities

    @property
    def is_local(self) -> bool:
        return self.lifecycle == "local"

    def to_dict(self, *, experimental: bool | None = None) -> dict[str, object]:
        return {
            "id": self.id,
            "family": self.family,
            "provider": self.provider,
            "modalities": list(self.modalities),
            "training_modes": list(self.training_modes),
            "supports_thinking": self.supports_thinking,
            "supports_vision": self.supports_vision,
            "max_images_per_message": self.max_images_per_message,
            "lifecycle": self.lifecycle,
            "experimental": self.lifecycle == "experimental" if experimental is None else experimental,
            "architecture": self.architecture,
            "parameters": self.parameters,
        }


def _qwen3(model_id: str, *, rl: bool, thinking: bool = False, experimental: bool = False, params: str = "") -> ModelInfo:
    return ModelInfo(
        id=model_id,
        family="Qwen3",
        provider="Qwen",
        modalities=TEXT,
        training_modes=("sft", "rl") if rl else ("sft",),
        supports_thinking=thinking,
        lifecycle="experimental" if experimental else "stable",
        parameters=params,
    )


def _qwen3_vl(size: str, variant: str, *, rl: bool) -> ModelInfo:
    return ModelInfo(
        id=f"Qwen/Qwen3-VL-{size}-{variant}",
        family="Qwen3-VL",
        provider="Qwen",
        modalities=TEXT_IMAGE,
        training_modes=("sft", "rl") if rl else ("sft",),
        supports_thinking=variant == "Thinking",
        max_images_per_message=1,
        architecture="Qwen3VLForConditionalGeneration",
        parameters=size,
    )


def _build() -> tuple[ModelInfo, ...]:
    models: list[ModelInfo] = []
    for size, rl in (("0.6B", True), ("1.7B", True), ("4B", True), ("8B", True), ("14B", True),
                     ("30B-A3B", True), ("32B", False)):
        models.append(_qwen3(f"Qwen/Qwen3-{size}", rl=rl, params=size))
    models.append(_qwen3("Qwen/Qwen3-4B-2507", rl=True, params="4B"))
    for suffix in ("", "-FP8"):
        models.append(_qwen3(f"Qwen/Qwen3-4B-Instruct-2507{suffix}", rl=True, params="4B"))
        models.append(_qwen3(f"Qwen/Qwen3-30B-A3B-Instruct-2507{suffix}", rl=True, params="30B-A3B"))
        models.append(_qwen3(f"Qwen/Qwen3-235B-A22B-Instruct-2507{suffix}", rl=False, experimental=True,
                             params="235B-A22B"))
        models.append(_qwen3(f"Qwen/Qwen3-4B-Thinking-2507{suffix}", rl=True, thinking=True, experimental=True,
                             params="4B"))
        models.append(_qwen3(f"Qwen/Qwen3-30B-A3B-Thinking-2507{suffix}", rl=True, thinking=True,
                             experimental=True, params="30B-A3B"))
        models.append(_qwen3(f"Qwen/Qwen3-235B-A22B-Thinking-2507{suffix}", rl=False, thinking=True,
                             experimental=True, params="235B-A22B"))
    for suffix in ("", "-FP8"):
        models.append(ModelInfo(id=f"Qwen/Qwen3-Coder-30B-A3B-Instruct{suffix}", family="Qwen3-Coder",
                                provider="Qwen", modalities=TEXT, training_modes=("sft", "rl"),
                                architecture="Qwen3MoeForCausalLM", parameters="30B-A3B"))
        models.append(ModelInfo(id=f"Qwen/Qwen3-Coder-480B-A35B-Instruct{suffix}", family="Qwen3-Coder",
                                provider="Qwen", modalities=TEXT, training_modes=("sft",),
                                lifecycle="experimental", architecture="Qwen3MoeForCausalLM",
                                parameters="480B-A35B"))
    for size in ("2B", "4B", "8B", "30B-A3B", "32B", "235B-A22B"):
        for variant in ("Instruct", "Thinking"):
            models.append(_qwen3_vl(size, variant, rl=size in {"2B", "4B", "8B"}))
    # Tiny models with the real architectures, built locally by the embedded backend (no download needed).
    models.append(ModelInfo(id="synth-ai/tiny-qwen3", family="Qwen3", provider="synth-ai (local)", modalities=TEXT,
                            training_modes=("sft", "rl"), lifecycle="local", parameters="0.14M",
                            notes="Built locally with the Qwen3 architecture; for tests and demos."))
    models.append(ModelInfo(id="synth-ai/tiny-qwen3-vl", family="Qwen3-VL", provider="synth-ai (local)",
                            modalities=TEXT_IMAGE, training_modes=("sft", "rl"), lifecycle="local",
                            max_images_per_message=1, architecture="Qwen3VLForConditionalGeneration",
                            parameters="0.26M",
                            notes="Built locally with the Qwen3-VL architecture; for tests and demos."))
    models.append(ModelInfo(id="synth-ai/tiny-qwen3-hd64", family="Qwen3", provider="synth-ai (local)",
                            modalities=TEXT, training_modes=("sft", "rl"), lifecycle="local", parameters="0.43M",
                            notes="Built locally like synth-ai/tiny-qwen3, with head_dim 64 (the smallest head vLLM's "
                            "CPU attention runs); for vLLM rollouts on a CPU."))
    models.append(ModelInfo(id="synth-ai/random-qwen3-34m", family="Qwen3", provider="synth-ai (local)",
                            modalities=TEXT, training_modes=("sft", "rl"), lifecycle="local", parameters="34M",
                            notes="Built locally with the Qwen3 architecture and random weights; for benchmarks "
                            "where the model's compute dominates."))
    return tuple(models)


MODELS: tuple[ModelInfo, ...] = _build()
_BY_LOWER: dict[str, ModelInfo] = {m.id.lower(): m for m in MODELS}


@dataclass(frozen=True)
class ResolvedModel:
    """A model reference resolved against the registry."""

    requested: str
    canonical: str  # canonical id as given (base id, or the fine-tuned id with its base canonicalised)
    base: ModelInfo
    prefix: str | None = None  # "ft" | "fft" | "qft" | "rl" for fine-tuned ids
    extra: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_fine_tuned(self) -> bool:
        return self.prefix is not None


def all_models() -> tuple[ModelInfo, ...]:
    return MODELS


def experimental_ids(environ: Mapping[str, str] | None = None) -> set[str]:
    """Experimental model ids: the registry's, plus any listed in `SDK_EXPERIMENTAL_MODELS` (CSV)."""
    env = os.environ if environ is None else environ
    ids = {m.id for m in MODELS if m.lifecycle == "experimental"}
    for raw in env.get("SDK_EXPERIMENTAL_MODELS", "").split(","):
        info = _BY_LOWER.get(raw.strip().lower())
        if info is not None:
            ids.add(info.id)
    return ids


def experimental_allowed(flag: bool | None, environ: Mapping[str, str] | None = None) -> bool:
    """`--allow-experimental/--no-allow-experimental` wins; unset falls back to `SDK_EXPERIMENTAL=1`."""
    if flag is not None:
        return flag
    env = os.environ if environ is None else environ
    return env.get("SDK_EXPERIMENTAL", "").strip().lower() in {"1", "true", "yes", "on"}


def find_model(model_id: str) -> ModelInfo | None:
    return _BY_LOWER.get(model_id.strip().lower())


def close_matches(model_id: str, limit: int = 5) -> list[str]:
    lowered = model_id.strip().lower()
    tail = lowered.split("/")[-1]
    # Ids that start like the request (`Qwen/Qwen3-VL-2B` -> the two VL-2B ids) first, then similar spellings.
    hits = [k for k in _BY_LOWER if tail and k.split("/")[-1].startswith(tail)]
    hits += [k for k in difflib.get_close_matches(lowered, list(_BY_LOWER), n=limit, cutoff=0.6) if k not in hits]
    if not hits:  # fall back to substring matches on the part after the org
        hits = [k for k in _BY_LOWER if tail and tail in k]
    return [_BY_LOWER[h].id for h in hits[:limit]]


def resolve_model(model_id: str, *, allow_fine_tuned: bool = True) -> ResolvedModel:
    """Resolve a base id or a fine-tuned id (`ft:<base>:<job>`) to its registry entry."""
    raw = (model_id or "").strip()
    if not raw:
        raise InvalidInputError("Model identifier is empty.", hint="Set a model id such as 'Qwen/Qwen3-4B'.")
    info = find_model(raw)
    if info is not None:
        return ResolvedModel(requested=raw, canonical=info.id, base=info)
    head, sep, rest = raw.partition(":")
    if sep and head.lower() in FINE_TUNED_PREFIXES:
        segments = rest.split(":")
        for index, segment in enumerate(segments):
            base = find_model(segment)
            if base is None:
                continue
            if not allow_fine_tuned:
                raise InvalidInputError(
                    f"Model '{raw}' is a fine-tuned id; a base model is required here.",
                    hint=f"Use the base model '{base.id}', or start from the fine-tuned model in an RL config "
                    "via [model].source.",
                )
            parts = [head.lower(), *segments[:index], base.id, *segments[index + 1:]]
            return ResolvedModel(requested=raw, canonical=":".join(parts), base=base, prefix=head.lower(),
                                 extra=tuple(segments[index + 1:]))
    matches = close_matches(raw.split(":")[1] if sep and head.lower() in FINE_TUNED_PREFIXES else raw)
    hint = (f"Did you mean: {', '.join(matches)}? " if matches else "") + "Run `synth-ai models list` for all ids."
    raise InvalidInputError(f"Model '{raw}' is not supported.", hint=hint, details={"close_matches": matches})


def check_trainable(resolved: ResolvedModel, mode: str, *, allow_experimental: bool,
                    environ: Mapping[str, str] | None = None) -> None:
    """Refuse models that cannot be trained in `mode` ("sft" | "rl") or that are gated as experimental."""
    base = resolved.base
    if mode not in base.training_modes:
        capable = [m.id for m in MODELS if mode in m.training_modes and m.family == base.family]
        raise InvalidInputError(
            f"Model '{base.id}' does not support {mode.upper()} training (supported modes: "
            f"{', '.join(base.training_modes)}).",
            hint=f"Pick a {mode.upper()}-capable model, e.g. {', '.join(capable[:4])}.",
        )
    if base.id in experimental_ids(environ) and not allow_experimental:
        raise InvalidInputError(
            f"Model '{base.id}' is experimental and disabled.",
            hint="Pass --allow-experimental or set SDK_EXPERIMENTAL=1 to use it.",
        )


def parse_params_b(text: str) -> float | None:
    """'32B' -> 32, '30B-A3B' -> 30 (total, what memory needs), '0.14M' -> 0.00014; '' -> None."""
    match = re.match(r"\s*([0-9.]+)\s*([MB])", text or "", re.IGNORECASE)
    if not match:
        return None
    value = float(match.group(1))
    return value / 1000.0 if match.group(2).upper() == "M" else value


def model_params_b(model: str) -> float | None:
    """The model's parameters in billions from the registry (a fine-tune `ft:<base>:...` counts as its base);
    None for a model the registry does not know or gives no size."""
    base = model.split(":")[1] if model.startswith("ft:") and model.count(":") >= 2 else model
    info = find_model(base)
    return parse_params_b(info.parameters) if info is not None else None
