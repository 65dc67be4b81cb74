"""SFT config: the rules across keys of synth-ai 0.2.17's `SFTConfig` (its sections are in
`synth_ai.config.sft_schema`), and the resolved form the payload builder turns into `POST /learning/jobs`."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from synth_ai.config import model_rules
from synth_ai.config.common import (
    RL_ALGORITHMS,
    SFT_ALGORITHMS,
    ResolveContext,
    algorithm_combo,
    algorithm_complete,
    algorithm_label,
    describe_combos,
    table,
)
from synth_ai.config.diagnostics import Findings, checked_data, validate_section
from synth_ai.config.kinds import FULL_MODES, LORA_MODES, SFT_TRAINING_MODES
from synth_ai.config.loaded import LoadedConfig
from synth_ai.config.sft_schema import STEP_KEYS, ModelConfigSection, SFTConfig
from synth_ai.config.toml_source import TomlSource, display_path
from synth_ai.config.unused_keys import note_unused_keys
from synth_ai.errors import InvalidInputError
from synth_ai.models.registry import ModelInfo, check_trainable, experimental_allowed, resolve_model

__all__ = ["STEP_KEYS", "SFTConfig", "load_sft", "uses_lora"]


def load_sft(source: TomlSource, ctx: ResolveContext) -> LoadedConfig:
    findings = Findings(source)
    data = source.data
    if "job" not in data and isinstance(data.get("model"), str):
        data = {**data, "job": {"model": data["model"]}}  # a top-level `model = "..."` string is accepted
    validated = validate_section(findings, SFTConfig, data)
    data = checked_data(validated, data)
    note_unused_keys(findings, "sft", data)
    default_algorithm = _check_algorithm(findings, data)
    model_id = ctx.model or table(data, "job").get("model")
    if not (isinstance(model_id, str) and model_id.strip()):
        if "job" in data:  # a missing [job] table is already reported by the schema pass
            findings.error(("job", "model"), "no model to fine-tune",
                           fix='set [job] model = "Qwen/Qwen3-4B" (a supported base model) or pass --model')
        model_id = None
    resolved_model = None
    if model_id:
        try:
            # A fine-tuned or imported id (`ft:`, `rl:`, `imported:`) is a model to continue from: the backend
            # knows whether it holds it (the embedded one does; an unknown id is its 400, naming the model).
            resolved_model = resolve_model(model_id)
            check_trainable(resolved_model, "sft",
                            allow_experimental=experimental_allowed(ctx.allow_experimental, ctx.environ),
                            environ=ctx.environ)
        except InvalidInputError as exc:
            findings.error_found(("job", "model"), exc.message, model_id, fix=exc.hint)
            resolved_model = None
    _check_modes(findings, data)
    _check_steps(findings, data)
    _check_parallelism(findings, data)
    dataset = _resolve_dataset(findings, data, ctx, source)
    validation = _resolve_validation(findings, data, source)
    findings.raise_if_errors()
    assert validated is not None

    resolved = validated.model_dump(mode="json", exclude_none=True, by_alias=True)
    if default_algorithm is not None:
        resolved["algorithm"] = default_algorithm
    hyper = resolved.setdefault("hyperparameters", {})
    if "n_epochs" in hyper and any(k in hyper for k in STEP_KEYS[1:]):
        findings.warn(("hyperparameters",), "both n_epochs and a step count are set; the step count wins",
                      fix="keep only one of n_epochs / total_steps")
    if resolved_model is not None:
        resolved.setdefault("job", {})["model"] = resolved_model.canonical
        _merge_model_table(findings, resolved, resolved_model.base)
        model_rules.resolve_sft(findings, resolved_model.base, resolved, uses_lora(resolved))
    _check_global_batch(findings, resolved)
    findings.raise_if_errors()
    return LoadedConfig(kind="sft", source=source, resolved=resolved, issues=findings.issues, model=resolved_model,
                        dataset=dataset, validation_dataset=validation)


def _merge_model_table(findings: Findings, resolved: dict[str, Any], info: ModelInfo) -> None:
    """Copy [model] settings (the docs' spelling) into [model_config], where the vision rules read them."""
    model = resolved.get("model")
    if not isinstance(model, dict):
        return
    if not info.supports_vision:
        model_rules.reject_vision_on_text_model(findings, info, [
            (("model", key), model[key], key != "supports_vision" or model[key] is True)
            for key in ("supports_vision", "max_images_per_message", "vision_processor_id") if key in model])
        return
    target = resolved.setdefault("model_config", {})
    for key, value in model.items():
        if key not in ModelConfigSection.model_fields:
            continue
        if key in target and target[key] != value:
            findings.error_found(("model", key), f"conflicts with [model_config].{key} = {target[key]!r}", value,
                                 fix="set it in one of the two tables")
        target.setdefault(key, value)
    if not target:
        del resolved["model_config"]


def uses_lora(config: dict[str, Any]) -> bool:
    variety = str(table(config, "algorithm").get("variety", "")).lower()
    mode = str(table(config, "training").get("mode", "")).lower()
    kind = str(table(config, "hyperparameters").get("train_kind", "")).lower()
    qlora = table(config, "training").get("use_qlora") is True
    return variety == "lora" or mode in LORA_MODES or kind in LORA_MODES or qlora


def _check_algorithm(findings: Findings, data: dict[str, Any]) -> dict[str, str] | None:
    """Check [algorithm]; when it is absent (the product docs' SFT config has none), return the default one."""
    algorithm = data.get("algorithm")
    if algorithm is None:
        return _default_algorithm(findings, data)
    if not isinstance(algorithm, dict):
        return None
    if not algorithm_complete(algorithm):
        return None  # a missing or mistyped key: reported by the schema pass
    combo = algorithm_combo(algorithm)
    if combo in SFT_ALGORITHMS:
        return None
    if combo in RL_ALGORITHMS:
        findings.error(("algorithm",), f"config contains algorithm '{algorithm_label(algorithm)}', but this command "
                       "expects SFT", fix="use `--type rl` for RL configs")
        return None
    findings.error_found(("algorithm",), "unsupported algorithm configuration", algorithm_label(algorithm),
                         fix="use " + describe_combos(SFT_ALGORITHMS))
    return None


def _default_algorithm(findings: Findings, data: dict[str, Any]) -> dict[str, str]:
    """offline/sft, with the variety following [training].mode and use_qlora (LoRA for lora/qlora/peft)."""
    training = table(data, "training")
    mode = training.get("mode")
    if isinstance(mode, str) and mode.lower() in LORA_MODES:
        variety, why = "lora", f'from [training].mode = "{mode}"'
    elif training.get("use_qlora") is True and not (isinstance(mode, str) and mode.lower() in FULL_MODES):
        variety, why = "lora", "from [training].use_qlora = true"
    elif isinstance(mode, str) and mode.strip():
        variety, why = "fft", f'from [training].mode = "{mode}"'
    else:
        variety, why = "fft", "no LoRA mode is set"
    findings.note(("algorithm",), f'not set; using type = "offline", method = "sft", variety = "{variety}" '
                  f"({why})")
    return {"type": "offline", "method": "sft", "variety": variety}


def _check_steps(findings: Findings, data: dict[str, Any]) -> None:
    """The product docs require a step count; 0.2.17 silently trained one epoch without one."""
    hyper = data.get("hyperparameters")
    if hyper is not None and not isinstance(hyper, dict):
        return  # wrong type: reported by the schema pass
    if hyper is None or not any(k in hyper for k in STEP_KEYS):
        findings.error(("hyperparameters",), "no training length: include at least one of " + ", ".join(STEP_KEYS),
                       fix="add e.g. n_epochs = 1 (or total_steps = 100) under [hyperparameters]")


def _check_modes(findings: Findings, data: dict[str, Any]) -> None:
    """The algorithm's variety, [training].mode and use_qlora must not contradict each other."""
    variety = str(table(data, "algorithm").get("variety", "")).lower()
    mode = table(data, "training").get("mode")
    if not isinstance(mode, str):
        return
    if mode.lower() not in SFT_TRAINING_MODES and not mode.lower().startswith("sft"):
        close = difflib.get_close_matches(mode.lower(), sorted(SFT_TRAINING_MODES), n=1)
        hint = f'did you mean "{close[0]}"? ' if close else ""
        findings.error_found(("training", "mode"), "unknown training mode", mode,
                             fix=f'{hint}use "full_finetune", "lora" or "qlora"')
        return
    if table(data, "training").get("use_qlora") is True and mode.lower() in FULL_MODES:
        findings.error_found(("training", "use_qlora"), "QLoRA with a full fine-tune mode", True,
                             fix='set [training].mode = "qlora" (or "lora"), or use_qlora = false')
        return
    lora_mode = mode.lower() in LORA_MODES
    if variety == "fft" and lora_mode:
        findings.error_found(("training", "mode"), "LoRA mode with a full fine-tune algorithm (variety = \"fft\")",
                             mode, fix='set [algorithm].variety = "lora", or [training].mode = "full_finetune"')
    elif variety == "lora" and mode.lower() in FULL_MODES:
        findings.error_found(("training", "mode"), "full fine-tune mode with a LoRA algorithm (variety = \"lora\")",
                             mode, fix='set [training].mode = "lora", or [algorithm].variety = "fft"')


def _check_parallelism(findings: Findings, data: dict[str, Any]) -> None:
    parallelism = table(table(data, "hyperparameters"), "parallelism")
    if parallelism.get("bf16") is True and parallelism.get("fp16") is True:
        findings.error(("hyperparameters", "parallelism", "fp16"), "bf16 and fp16 cannot both be on",
                       fix="keep one of them")
    compute = table(data, "compute")
    count, nodes = compute.get("gpu_count"), compute.get("nodes", 1)
    tp, pp = parallelism.get("tensor_parallel_size", 1), parallelism.get("pipeline_parallel_size", 1)
    numbers = (count, nodes, tp, pp)
    if all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in numbers) and tp * pp > count * nodes:
        findings.error_found(("hyperparameters", "parallelism", "tensor_parallel_size"),
                             f"tensor x pipeline parallelism needs {tp * pp} GPUs but [compute] provides "
                             f"{count * nodes}", tp, fix="lower the parallel degrees or raise [compute].gpu_count")


def _check_global_batch(findings: Findings, resolved: dict[str, Any]) -> None:
    hyper = resolved.get("hyperparameters", {})
    compute = resolved.get("compute", {})
    global_batch = hyper.get("global_batch")
    per_device, accumulation = hyper.get("per_device_batch"), hyper.get("gradient_accumulation_steps", 1)
    if isinstance(global_batch, int) and isinstance(per_device, int) and isinstance(accumulation, int):
        devices = compute.get("gpu_count", 1) * compute.get("nodes", 1) if compute else 1
        implied = per_device * accumulation * devices
        if implied != global_batch:
            findings.warn(("hyperparameters", "global_batch"),
                          f"per_device_batch x gradient_accumulation_steps x GPUs = {implied}, not {global_batch}",
                          fix="make global_batch match, or drop it and let it follow from the other three")


def _resolve_path(raw: str, source: TomlSource) -> Path:
    """Relative paths resolve against the working directory (as synth-ai 0.2.17 did), then the config's folder."""
    path = Path(raw).expanduser()
    if path.is_absolute() or path.exists():
        return path.resolve()
    beside_config = (source.path.parent / path).resolve()
    return beside_config if beside_config.exists() else path.resolve()


def _resolve_dataset(findings: Findings, data: dict[str, Any], ctx: ResolveContext, source: TomlSource) -> Path | None:
    job = table(data, "job")
    raw, key = (ctx.dataset, None) if ctx.dataset else next(
        ((job[k], k) for k in ("data", "data_path") if isinstance(job.get(k), str) and job[k].strip()), (None, None))
    if raw is None:
        if ctx.require_dataset:
            findings.error(("job", "data"), "no training dataset",
                           fix='pass --dataset PATH.jsonl or set [job] data = "path/to/train.jsonl"')
        return None
    path = _resolve_path(raw, source)
    if not path.is_file():
        where = ("job", key) if key else ("job", "data")
        message = f"dataset not found: {display_path(path)}"
        fix = "check the path (relative paths are resolved from the working directory, then the config's folder)"
        if not ctx.require_dataset:
            findings.warn(where, message, fix=fix)
        elif key:
            findings.error_found(where, message, raw, fix=fix)
        else:
            findings.error(where, f"{message} (from --dataset)", fix=fix)
        return None
    return path


def _resolve_validation(findings: Findings, data: dict[str, Any], source: TomlSource) -> Path | None:
    raw = table(data, "data").get("validation_path")
    if not (isinstance(raw, str) and raw.strip()):
        return None
    path = _resolve_path(raw, source)
    if not path.is_file():
        findings.warn(("data", "validation_path"), f"validation dataset {display_path(path)} not found; "
                      "training continues without validation", fix="fix the path or remove validation_path")
        return None
    return path
