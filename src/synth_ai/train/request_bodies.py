"""Request bodies for creating training jobs, in the shapes synth-ai 0.2.17 sent (reference §2.2, §2.3).

One deliberate difference: the SFT body keeps LoRA and vision settings (in `hyperparameters` and
`metadata.effective_config`) instead of dropping them, so a backend can act on them.
"""

from __future__ import annotations

import copy
from typing import Any

from synth_ai.config.loaded import LoadedConfig
from synth_ai.config.sft import uses_lora

# Hyperparameters always sent when present; others the user set are forwarded too (see module docstring).
SFT_VALIDATION_DEFAULTS = {
    "evaluation_strategy": "steps",
    "eval_steps": 0,
    "save_best_model_at_end": True,
    "metric_for_best_model": "val.loss",
    "greater_is_better": False,
}
_LORA_KEYS = {"r": "lora_rank", "alpha": "lora_alpha", "dropout": "lora_dropout",
              "target_modules": "lora_target_modules"}


def build_rl_payload(config: LoadedConfig, *, api_base: str) -> dict[str, Any]:
    """`POST /rl/jobs` body: the whole resolved config travels in `data.config`."""
    assert config.kind == "rl" and config.model is not None and config.task_url
    resolved = copy.deepcopy(config.resolved)
    table = "model" if isinstance(resolved.get("model"), dict) else "policy"
    model_table = resolved.get(table, {})
    data: dict[str, Any] = {"endpoint_base_url": config.task_url.rstrip("/"), "config": resolved}
    if model_table.get("source"):
        data["model"] = model_table["source"]
    else:
        data["base_model"] = config.model.base.id
    return {
        "job_type": "rl",
        "compute": resolved.get("compute", {}),
        "data": data,
        "tags": {"source": "train-cli"},
        "metadata": {"backend_base_url": api_base},
    }


def build_sft_payload(config: LoadedConfig, *, training_file_id: str | None = None,
                      validation_file_ids: list[str] | None = None) -> dict[str, Any]:
    """`POST /learning/jobs` body. `training_file_id` is None until the dataset is uploaded."""
    assert config.kind == "sft" and config.model is not None
    resolved = copy.deepcopy(config.resolved)
    hyper: dict[str, Any] = dict(resolved.get("hyperparameters", {}))
    training = resolved.get("training", {})
    lora = {**training.get("lora", {}), **resolved.get("lora", {})}
    lora_mode = uses_lora(resolved)
    if lora_mode:
        for key, name in _LORA_KEYS.items():
            if key in lora:
                hyper.setdefault(name, lora[key])
    hyper.setdefault("train_kind", "peft" if lora_mode else "fft")
    validation = training.get("validation")
    if isinstance(validation, dict):
        for key, default in SFT_VALIDATION_DEFAULTS.items():
            hyper[key] = validation.get(key, default)

    effective: dict[str, Any] = {}
    compute = resolved.get("compute")
    if compute:
        effective["compute"] = {k: compute[k] for k in ("gpu_type", "gpu_count", "nodes") if k in compute}
    data_section: dict[str, Any] = {}
    if "topology" in resolved.get("data", {}):
        data_section["topology"] = resolved["data"]["topology"]
    if validation_file_ids:
        data_section["validation_files"] = list(validation_file_ids)
    if data_section:
        effective["data"] = data_section
    training_section = {k: training[k] for k in ("mode", "use_qlora") if k in training}
    if isinstance(validation, dict):
        training_section["validation"] = {"enabled": validation.get("enabled", True)}
    if training_section:
        effective["training"] = training_section
    if resolved.get("model_config"):
        effective["model_config"] = resolved["model_config"]
    if lora_mode and (lora or "lora_target_modules" in hyper):
        effective["lora"] = {k: hyper[name] for k, name in _LORA_KEYS.items() if name in hyper}
    if resolved.get("logging"):  # experiment trackers: the job's worker reports to them (docs/tracking.md)
        effective["logging"] = resolved["logging"]

    return {
        "model": config.model.canonical,
        "hyperparameters": hyper,
        "training_type": "sft_offline",
        "metadata": {"effective_config": effective},
        "training_file_id": training_file_id,
    }
