"""What a Tinker training client may ask for, checked without torch by the API (`backend/api/routes/tinker_api.py`)
and read by the `tinker` job's worker (`backend/trainers/tinker`): its LoRA and optimizer settings, the losses the
backend computes and the inputs each needs, and `tinker://` checkpoint paths. Shared definitions: both sides of the
wire contract agree on them here."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from synth_ai.config.job_specs import JobSpec
from synth_ai.errors import InvalidInputError

MAX_LORA_RANK = 256
_RL_INPUTS = ("logprobs", "advantages")
_CLIPS = ("clip_low_threshold", "clip_high_threshold")
# loss -> (the loss_fn_inputs it needs besides target_tokens, those it may take), all one value per target token
SUPPORTED_LOSSES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "cross_entropy": ((), ("weights",)),
    "importance_sampling": (_RL_INPUTS, ()),
    "ppo": (_RL_INPUTS, _CLIPS),
    "cispo": (_RL_INPUTS, _CLIPS),
    "dro": (_RL_INPUTS, ()),
    "gspo": (_RL_INPUTS, (*_CLIPS, "sequence_ratio_mask")),
}
# loss -> its loss_fn_config keys and their defaults (the clip thresholds are bounds on the ratio, not epsilons)
LOSS_CONFIG: dict[str, dict[str, float]] = {
    "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "cispo": {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0},
    "dro": {"beta": 0.05},
    "gspo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
}
REFUSED_LOSSES = {
    "stable_reinforce": "it needs stability information recorded by the sampler that the SDK does not define "
                        "(record_stability_info); use gspo, cispo or ppo for off-policy updates",
    "custom": "server-side custom losses are off (client/config custom_loss_server_side = false); "
              "forward_backward_custom computes the loss in your process and works as it is",
}
CHECKPOINT_KINDS = ("weights", "sampler_weights")
DEFAULT_MAX_TOKENS = 256  # a sample request without max_tokens


@dataclass(frozen=True)
class TinkerSettings:
    """The settings of one training client (the `tinker` job's payload), in the shape `wrap_lora` reads."""
    model_id: str
    session_id: str
    base_model: str
    lora_r: int
    lora_alpha: float
    seed: int
    job_id: str = ""
    lora_targets: Any = "all-linear"
    lora_dropout: float = 0.0
    mode: str = "lora"


def lora_settings(lora_config: Any, optimizer_config: Any) -> dict[str, Any]:
    """The create_model body's LoRA and optimizer configs, checked; the job stores what this returns."""
    lora = lora_config if isinstance(lora_config, dict) else {}
    rank = lora.get("rank", 32)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= MAX_LORA_RANK:
        raise InvalidInputError(f"lora_config.rank must be a whole number from 1 to {MAX_LORA_RANK} "
                                f"(found {rank!r}).")
    for part in ("train_mlp", "train_attn"):
        if lora.get(part, True) is not True:
            raise InvalidInputError(f"lora_config.{part} = false is not supported: LoRA adapts every linear "
                                    "layer of the decoder here.")
    optimizer = optimizer_config.get("type", "adamw") if isinstance(optimizer_config, dict) else "adamw"
    if optimizer != "adamw":
        raise InvalidInputError(f"optimizer_config.type '{optimizer}' is not supported; this backend trains with "
                                "AdamW (AdamParams in optim_step).")
    seed = lora.get("seed")
    return {"rank": rank, "seed": seed if isinstance(seed, int) and not isinstance(seed, bool) else 0}


def check_body(body: Any, **_context: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not body.get("model_id") or not body.get("base_model"):
        raise InvalidInputError("A tinker job is created by the Tinker API's create_model, not posted directly.")
    return dict(body)


def read_settings(spec: JobSpec) -> TinkerSettings:
    lora = spec.get("lora") or {}
    rank = int(lora.get("rank", 32))
    # alpha = 2 x rank, as the SFT trainer's default: one client's update equals an SFT step's for the same batch
    return TinkerSettings(model_id=str(spec.get("model_id")), session_id=str(spec.get("session_id")),
                          base_model=str(spec.get("base_model")), lora_r=rank, lora_alpha=2.0 * rank,
                          seed=int(lora.get("seed") or 0), job_id=spec.job_id)


def check_loss(loss_fn: str, config: dict[str, Any]) -> None:
    """A loss this backend computes, with only the config keys it reads (numbers)."""
    if loss_fn not in SUPPORTED_LOSSES:
        why = REFUSED_LOSSES.get(loss_fn)
        raise InvalidInputError(f"loss_fn '{loss_fn}' is not supported by this backend" + (f": {why}." if why else "."),
                                hint=f"Use one of: {', '.join(SUPPORTED_LOSSES)}.")
    known = LOSS_CONFIG.get(loss_fn, {})
    for key, value in config.items():
        if key not in known:
            takes = f"takes {', '.join(known)}" if known else "takes no loss_fn_config"
            raise InvalidInputError(f"loss_fn_config.{key} is not read by loss_fn '{loss_fn}' (it {takes}).")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InvalidInputError(f"loss_fn_config.{key} must be a number (found {value!r}).")


def check_datum(datum: dict[str, Any], loss_fn: str, where: str) -> None:
    """Every loss input has one row per model-input token (the SDK's targets are the next tokens); cross_entropy
    may give several targets per token (target_tokens and weights [tokens, K]: distillation's top-K)."""
    tokens = len(datum["tokens"])
    if tokens == 0:
        raise InvalidInputError(f"{where}.model_input has no tokens.")
    inputs = datum["inputs"]
    required, optional = SUPPORTED_LOSSES[loss_fn]
    needed = ("target_tokens", *required)
    missing = [name for name in needed if name not in inputs]
    if missing:
        raise InvalidInputError(f"{where}.loss_fn_inputs lacks {', '.join(missing)} (loss_fn '{loss_fn}' needs "
                                f"{', '.join(needed)}).")
    target_shape = inputs["target_tokens"]["shape"]
    for name, tensor in inputs.items():
        if name not in needed and name not in optional:
            continue  # an input this loss does not read
        shape = tensor["shape"]
        if shape[0] != tokens:
            raise InvalidInputError(f"{where}.loss_fn_inputs.{name} has {shape[0]} rows but the model input has "
                                    f"{tokens} tokens; give one per token.")
        wide = loss_fn == "cross_entropy" and name in ("target_tokens", "weights")
        if (len(shape) > 1 and not wide) or (wide and shape != target_shape) or len(shape) > 2:
            raise InvalidInputError(f"{where}.loss_fn_inputs.{name} has shape {shape}; it must be [{tokens}]" +
                                    (f" or target_tokens' shape {target_shape}." if wide else "."))


def tinker_path(model_id: str, kind: str, name: str) -> str:
    """The `tinker://` path of training client `model_id`'s checkpoint `<kind>/<name>` (what `parse_tinker_path`
    reads back)."""
    return f"tinker://{model_id}/{kind}/{name}"


def parse_tinker_path(path: Any) -> tuple[str, str, str]:
    """`tinker://<training client>/<weights|sampler_weights>/<name>` -> its three parts."""
    text = path if isinstance(path, str) else ""
    parts = text[len("tinker://"):].split("/") if text.startswith("tinker://") else []
    if len(parts) != 3 or not all(parts) or parts[1] not in CHECKPOINT_KINDS:
        raise InvalidInputError(f"'{path}' is not a checkpoint path of this backend.",
                                hint="Paths look like tinker://<model id>/weights/<name> or "
                                     "tinker://<model id>/sampler_weights/<name>, as save_state and "
                                     "save_weights_for_sampler return them.")
    return parts[0], parts[1], parts[2]


def check_sampling_params(params: Any) -> dict[str, Any]:
    """An `asample` body's sampling_params, checked as the SDK's SamplingParams allows them."""
    params = params if isinstance(params, dict) else {}
    max_tokens = params.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise InvalidInputError(f"sampling_params.max_tokens must be a whole number >= 1 (found {max_tokens!r}).")
    for name, low, high in (("temperature", 0.0, None), ("top_p", 0.0, 1.0)):
        value = params.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low or \
                (high is not None and value > high) or (name == "top_p" and value == 0):
            span = f"in (0, {high}]" if name == "top_p" else f">= {low}"
            raise InvalidInputError(f"sampling_params.{name} must be a number {span} (found {value!r}).")
    top_k = params.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k == 0 or top_k < -1):
        raise InvalidInputError(f"sampling_params.top_k must be -1 (no limit) or a whole number >= 1 "
                                f"(found {top_k!r}).")
    stop = params.get("stop")
    items = [stop] if isinstance(stop, str) else stop
    if stop is not None and not (isinstance(items, list) and (
            all(isinstance(s, int) and not isinstance(s, bool) for s in items)
            or all(isinstance(s, str) and s for s in items))):
        raise InvalidInputError("sampling_params.stop must be a string, or a list of token ids or of non-empty "
                                f"strings, not a mix (found {stop!r}).")
    return params
