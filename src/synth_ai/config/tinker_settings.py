"""What a Tinker training client may ask for, checked without torch by the API (`backend/api/routes/tinker_api.py`)
and read by the `tinker` job's worker (`backend/trainers/tinker`): its LoRA and optimizer settings, the losses the
backend computes and the inputs each needs, and `tinker://` checkpoint paths. Shared definitions: both sides of the
wire contract agree on them here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synth_ai.config.job_specs import JobSpec
from synth_ai.errors import InvalidInputError

MAX_LORA_RANK = 256
# loss -> the loss_fn_inputs it needs besides target_tokens (all per target token)
SUPPORTED_LOSSES: dict[str, tuple[str, ...]] = {
    "cross_entropy": (),
    "importance_sampling": ("logprobs", "advantages"),
    "ppo": ("logprobs", "advantages"),
}
_OPTIONAL_INPUTS = {"weights"}
CHECKPOINT_KINDS = ("weights", "sampler_weights")


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


def check_datum(datum: dict[str, Any], loss_fn: str, where: str) -> None:
    """Every loss input has one value per model-input token (the SDK's targets are the next tokens)."""
    tokens = len(datum["tokens"])
    if tokens == 0:
        raise InvalidInputError(f"{where}.model_input has no tokens.")
    inputs = datum["inputs"]
    needed = ("target_tokens", *SUPPORTED_LOSSES[loss_fn])
    missing = [name for name in needed if name not in inputs]
    if missing:
        raise InvalidInputError(f"{where}.loss_fn_inputs lacks {', '.join(missing)} (loss_fn '{loss_fn}' needs "
                                f"{', '.join(needed)}).")
    for name, tensor in inputs.items():
        if name not in needed and name not in _OPTIONAL_INPUTS:
            continue  # an input this loss does not read
        if len(tensor["values"]) != tokens:
            raise InvalidInputError(f"{where}.loss_fn_inputs.{name} has {len(tensor['values'])} values but the "
                                    f"model input has {tokens} tokens; give one per token.")


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
