"""Which kind of config a TOML file is (rl, sft, eval, filter), inferred as synth-ai 0.2.17 does for training
configs, extended to eval and filter files and to SFT files shaped as the product documentation shows them
(`[job]` + `[hyperparameters]`, or a `[training].mode` such as `full_finetune`, with no `[algorithm]`)."""

from __future__ import annotations

from typing import Any

CONFIG_KINDS = ("rl", "sft", "eval", "filter")  # kinds of config file (not the backend's job kinds)
# `[training].mode` values of an SFT config (the documented ones and their aliases); no RL config uses them.
FULL_MODES = {"full_finetune", "full", "fft"}
LORA_MODES = {"lora", "peft", "qlora"}
SFT_TRAINING_MODES = FULL_MODES | LORA_MODES


def infer_kind(data: dict[str, Any]) -> str | None:
    """The config kind, or None when the file says nothing recognisable."""
    if isinstance(data.get("filter"), dict):
        return "filter"
    if isinstance(data.get("eval"), dict):
        return "eval"
    training_kind = infer_training_kind(data)
    if training_kind:
        return training_kind
    if "app_id" in data and "seeds" in data and "algorithm" not in data:
        return "eval"
    return None


def infer_training_kind(data: dict[str, Any]) -> str | None:
    """The reference's order of clues for `train --type auto` (a top-level `type` key is not one of them)."""
    algorithm = data.get("algorithm") if isinstance(data.get("algorithm"), dict) else {}
    method = str(algorithm.get("method", "")).lower()
    kind = str(algorithm.get("type", "")).lower()
    variety = str(algorithm.get("variety", "")).lower()
    if method in {"policy_gradient", "ppo", "reinforce"} or kind == "online" or variety in {"gspo", "grpo", "ppo"}:
        return "rl"
    if method in {"supervised_finetune", "sft"} or kind == "offline" or variety == "fft":
        return "sft"
    if str(data.get("job_type", "")).lower() == "rl":
        return "rl"
    services = data.get("services") if isinstance(data.get("services"), dict) else {}
    if "task_url" in services or "environment" in services:
        return "rl"
    training = data.get("training") if isinstance(data.get("training"), dict) else {}
    mode = str(training.get("mode", "")).lower()
    if mode.startswith("sft") or mode == "sft_offline":
        return "sft"
    hyper = data.get("hyperparameters") if isinstance(data.get("hyperparameters"), dict) else {}
    if str(hyper.get("train_kind", "")).lower() in {"sft", "fft"}:
        return "sft"
    # The product docs' SFT config has no [algorithm]: after every RL clue has been ruled out, these are SFT.
    if mode in SFT_TRAINING_MODES:
        return "sft"
    if isinstance(data.get("job"), dict) and isinstance(data.get("hyperparameters"), dict):
        return "sft"
    return None
