"""Rules that depend on the chosen model: Qwen3-VL vision settings and thinking modes.

What the product documents for Qwen3-VL: when the model is a VL SKU the resolved config gets
`supports_vision = true`, `max_images_per_message = <registry limit>` and `vision_processor_id = <model id>`
unless given; LoRA targets keep the vision projector; SFT batches are clamped to one example per device with
gradient accumulation raised to keep the global batch. Explicit values always win. Vision settings on a text-only
model are errors, not silently ignored. These functions edit the resolved config dict in place and record notes.
"""

from __future__ import annotations

from typing import Any

from synth_ai.config.diagnostics import Findings, KeyPath
from synth_ai.models.registry import ModelInfo

PROJECTOR_TARGETS = ("mm_projector", "all-linear")
DEFAULT_VL_LORA_TARGETS = ["all-linear"]


def _sub(data: dict[str, Any], *keys: str) -> dict[str, Any] | None:
    node: Any = data
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _truthy(table: dict[str, Any] | None, key: str) -> bool:
    return bool(table) and table.get(key) is True


def check_thinking(findings: Findings, info: ModelInfo | None, tables: list[tuple[KeyPath, dict[str, Any] | None]]) -> None:
    """A thinking mode on a model that cannot think does nothing: say so."""
    if info is None or info.supports_thinking:
        return
    for path, table in tables:
        if table and table.get("thinking_mode") is not None:
            findings.warn(path + ("thinking_mode",),
                          f"model '{info.id}' is not a thinking model; thinking_mode has no effect",
                          fix="remove thinking_mode, or pick a *-Thinking model")


def keep_projector(findings: Findings, path: KeyPath, lora: dict[str, Any], key: str = "target_modules") -> None:
    """Make sure a VL model's LoRA targets train the vision projector."""
    targets = lora.get(key)
    if targets is None:
        lora[key] = list(DEFAULT_VL_LORA_TARGETS)
        findings.note(path + (key,), "set to [\"all-linear\"] so LoRA covers the vision projector (Qwen3-VL)")
    elif isinstance(targets, list) and not any(t in PROJECTOR_TARGETS for t in targets):
        lora[key] = [*targets, "mm_projector"]
        findings.note(path + (key,), "added \"mm_projector\" so LoRA keeps the vision projector trainable (Qwen3-VL)")


def reject_vision_on_text_model(findings: Findings, info: ModelInfo, checks: list[tuple[KeyPath, Any, bool]]) -> None:
    """`checks` lists (key path, value, is_vision_setting) — each vision setting on a text model is an error."""
    for path, value, active in checks:
        if active:
            findings.error_found(path, f"model '{info.id}' is text-only; vision settings are not allowed", value,
                                 fix="remove this key, or use a Qwen3-VL model (e.g. Qwen/Qwen3-VL-4B-Instruct)")


def resolve_model_vision(findings: Findings, info: ModelInfo, table: dict[str, Any], path: KeyPath) -> int | None:
    """Inject the VL defaults into a model table; return the effective image limit (None: vision off)."""
    if table.get("supports_vision") is False:
        return None
    if "supports_vision" not in table:
        table["supports_vision"] = True
        findings.note(path + ("supports_vision",), f"set to true ({info.id} is a vision-language model)")
    if "max_images_per_message" not in table:
        table["max_images_per_message"] = info.max_images_per_message
        findings.note(path + ("max_images_per_message",),
                      f"set to {info.max_images_per_message} (the model's default limit)")
    if "vision_processor_id" not in table:
        table["vision_processor_id"] = info.id
        findings.note(path + ("vision_processor_id",), f"set to \"{info.id}\"")
    limit = table.get("max_images_per_message")
    return limit if isinstance(limit, int) else info.max_images_per_message


def resolve_rl(findings: Findings, info: ModelInfo, resolved: dict[str, Any], model_key: str) -> None:
    """Vision and thinking rules for an RL config (`model_key` is "model" or "policy")."""
    model_table = resolved.setdefault(model_key, {})
    rollout = _sub(resolved, "rollout")
    policy_config = _sub(resolved, "rollout", "policy_config")
    training = _sub(resolved, "training")
    vllm = _sub(resolved, "vllm")
    check_thinking(findings, info, [(("rollout",), rollout), (("rollout", "policy_config"), policy_config),
                                    (("evaluation",), _sub(resolved, "evaluation"))])
    _check_image_only(findings, [(("rollout",), rollout), (("rollout", "policy_config"), policy_config)])

    if not info.supports_vision:
        limit_mm = vllm.get("limit_mm_per_prompt") if vllm else None
        reject_vision_on_text_model(findings, info, [
            ((model_key, "supports_vision"), True, _truthy(model_table, "supports_vision")),
            ((model_key, "max_images_per_message"), model_table.get("max_images_per_message"),
             model_table.get("max_images_per_message") is not None),
            ((model_key, "vision_processor_id"), model_table.get("vision_processor_id"),
             model_table.get("vision_processor_id") is not None),
            (("training", "supports_vision"), True, _truthy(training, "supports_vision")),
            (("training", "max_images_per_message"), (training or {}).get("max_images_per_message"),
             bool(training) and training.get("max_images_per_message") is not None),
            (("rollout", "use_vision"), True, _truthy(rollout, "use_vision")),
            (("rollout", "image_only_mode"), True, _truthy(rollout, "image_only_mode")),
            (("rollout", "max_images_per_step"), (rollout or {}).get("max_images_per_step"),
             bool(rollout) and rollout.get("max_images_per_step") is not None),
            (("rollout", "policy_config", "use_vision"), True, _truthy(policy_config, "use_vision")),
            (("rollout", "policy_config", "image_only_mode"), True, _truthy(policy_config, "image_only_mode")),
            (("vllm", "limit_mm_per_prompt"), limit_mm,
             isinstance(limit_mm, dict) and any(v for v in limit_mm.values())),
        ])
        return

    limit = resolve_model_vision(findings, info, model_table, (model_key,))
    if limit is None:  # vision explicitly switched off on a VL model
        for path, table in ((("rollout",), rollout), (("rollout", "policy_config"), policy_config)):
            if _truthy(table, "use_vision"):
                findings.error(path + ("use_vision",), f"vision is off ([{model_key}].supports_vision = false) "
                               "but the rollout asks for it", fix="set one of the two consistently")
        return
    if rollout is not None:
        step_limit = rollout.get("max_images_per_step")
        if step_limit is None:
            rollout["max_images_per_step"] = limit
            findings.note(("rollout", "max_images_per_step"), f"set to {limit} (the model's image limit)")
        elif isinstance(step_limit, int) and step_limit > limit:
            findings.error_found(("rollout", "max_images_per_step"),
                                 f"more images per step than the model accepts (limit {limit})", step_limit,
                                 fix=f"set max_images_per_step <= {limit}, or raise "
                                     f"[{model_key}].max_images_per_message")
    if vllm is not None and "limit_mm_per_prompt" not in vllm:
        vllm["limit_mm_per_prompt"] = {"image": limit}
        findings.note(("vllm", "limit_mm_per_prompt"), f"set to {{ image = {limit} }}")
    trainer_mode = str(model_table.get("trainer_mode", "")).lower()
    lora_tables: list[tuple[KeyPath, dict[str, Any]]] = []
    if isinstance(resolved.get("lora"), dict):
        lora_tables.append((("lora",), resolved["lora"]))
    if training is not None and isinstance(training.get("lora"), dict):
        lora_tables.append((("training", "lora"), training["lora"]))
    if not lora_tables and trainer_mode == "lora":
        resolved["lora"] = {}
        lora_tables.append((("lora",), resolved["lora"]))
    for path, lora in lora_tables:
        keep_projector(findings, path, lora)


def resolve_sft(findings: Findings, info: ModelInfo, resolved: dict[str, Any], uses_lora: bool) -> None:
    """Vision rules for an SFT config: registry defaults, projector targets, batch clamping."""
    model_config = resolved.get("model_config") if isinstance(resolved.get("model_config"), dict) else None
    hyper = resolved.setdefault("hyperparameters", {})
    if not info.supports_vision:
        mc = model_config or {}
        reject_vision_on_text_model(findings, info, [
            (("model_config", "supports_vision"), True, mc.get("supports_vision") is True),
            (("model_config", "max_images_per_message"), mc.get("max_images_per_message"),
             mc.get("max_images_per_message") is not None),
            (("model_config", "vision_processor_id"), mc.get("vision_processor_id"),
             mc.get("vision_processor_id") is not None),
        ])
        return
    if model_config is None:
        model_config = resolved["model_config"] = {}
    if resolve_model_vision(findings, info, model_config, ("model_config",)) is None:
        return
    parallelism = hyper.setdefault("parallelism", {})
    if isinstance(parallelism, dict) and "bf16" not in parallelism and "fp16" not in parallelism:
        parallelism["bf16"] = True
        findings.note(("hyperparameters", "parallelism", "bf16"), "set to true (Qwen3-VL trains in bf16)")
    if uses_lora:
        lora = resolved.get("lora") if isinstance(resolved.get("lora"), dict) else None
        if lora is not None:
            keep_projector(findings, ("lora",), lora)
        if lora is None or "lora_target_modules" in hyper:
            keep_projector(findings, ("hyperparameters",), hyper, key="lora_target_modules")
    _clamp_batch(findings, hyper)


def _clamp_batch(findings: Findings, hyper: dict[str, Any]) -> None:
    per_device = hyper.get("per_device_batch")
    if isinstance(per_device, int) and per_device > 1:
        accumulation = hyper.get("gradient_accumulation_steps")
        accumulation = accumulation if isinstance(accumulation, int) else 1
        hyper["per_device_batch"] = 1
        hyper["gradient_accumulation_steps"] = accumulation * per_device
        findings.note(("hyperparameters", "per_device_batch"),
                      f"clamped from {per_device} to 1 for Qwen3-VL; gradient_accumulation_steps raised from "
                      f"{accumulation} to {accumulation * per_device} to keep the global batch")
    per_device_eval = hyper.get("per_device_eval_batch")
    if isinstance(per_device_eval, int) and per_device_eval > 1:
        hyper["per_device_eval_batch"] = 1
        findings.note(("hyperparameters", "per_device_eval_batch"),
                      f"clamped from {per_device_eval} to 1 for Qwen3-VL")


def _check_image_only(findings: Findings, tables: list[tuple[KeyPath, dict[str, Any] | None]]) -> None:
    for path, table in tables:
        if table and table.get("image_only_mode") is True and table.get("use_vision") is False:
            findings.error(path + ("image_only_mode",), "image_only_mode needs use_vision = true",
                           fix="set use_vision = true, or drop image_only_mode")


def check_eval(findings: Findings, info: ModelInfo | None, root: KeyPath, cfg: dict[str, Any]) -> None:
    """Eval policies: thinking on non-thinking models warns; vision on a text-only registry model fails."""
    policy_config = cfg.get("policy_config") if isinstance(cfg.get("policy_config"), dict) else None
    policy = cfg.get("policy") if isinstance(cfg.get("policy"), dict) else None
    tables = [(root, cfg), (root + ("policy_config",), policy_config), (root + ("policy",), policy)]
    check_thinking(findings, info, tables)
    _check_image_only(findings, tables)
    if info is not None and not info.supports_vision:
        reject_vision_on_text_model(findings, info, [
            (path + ("use_vision",), True, _truthy(table, "use_vision")) for path, table in tables
        ])
