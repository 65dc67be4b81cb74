"""Pieces both trainers (SFT and RL) use: training-mode spellings, the cancel exception and number readers; LoRA
wrapping (projector trained in full on Qwen3-VL), saving the final model with its card, loading a policy from a base
or fine-tuned id, the silent reporter of ranks other than 0, and small helpers. torch/peft imported lazily."""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path
from typing import Any

from synth_ai.errors import InvalidInputError

PROJECTOR_ALIASES = {"mm_projector", "projector", "merger", "visual.merger", "multi_modal_projector"}
# How a training mode may be spelled (SFT's train_kind / [training].mode, RL's [model].trainer_mode).
FULL_KINDS = {"full", "full_finetune", "full-finetune", "fft", "full_ft", "sft", "supervised_finetune"}
LORA_KINDS = {"lora", "peft", "qlora"}
DEFAULT_LORA_TARGETS = "all-linear"


class TrainingCancelled(Exception):
    """`should_stop()` answered True: training stopped between steps (a checkpoint was saved first)."""

    def __init__(self, step: int, checkpoint: Path | None) -> None:
        super().__init__(f"training stopped at step {step}")
        self.step = step
        self.checkpoint = checkpoint


def stop_reason(should_stop: Any) -> str:
    """Why `should_stop()` answered True, worded to follow "because": the job worker's stop signal can say (a
    cancel, the backend gone or shutting down, see `backend.jobs.worker.StopSignal.why`); a plain callable cannot."""
    why = getattr(should_stop, "why", None)
    return str(why()) if callable(why) else "its caller asked it to stop"


def first_set(*values: Any) -> Any:
    """The first value that is set (None and "" are unset; 0 and False are values)."""
    return next((v for v in values if v is not None and v != ""), None)


def _int(key: str, value: Any, *, minimum: int = 1) -> int:
    """A whole number >= minimum, for the trainers' own bounds and keys outside the config models."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{key} must be an integer (found {value!r}).")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{key} must be an integer (found {value!r}).") from None
    if not number.is_integer() or number < minimum:
        raise InvalidInputError(f"{key} must be an integer >= {minimum} (found {value!r}).")
    return int(number)


def _float(key: str, value: Any, *, low: float | None = None, high: float | None = None,
           strict_low: bool = False) -> float:
    """A finite number within the bounds, for the trainers' own bounds and keys outside the config models."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{key} must be a number (found {value!r}).")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{key} must be a number (found {value!r}).") from None
    if not math.isfinite(number) or (low is not None and (number <= low if strict_low else number < low)) or (
            high is not None and number > high):
        bounds = f"{'>' if strict_low else '>='} {low}" if low is not None else ""
        if high is not None:
            bounds += f"{' and ' if bounds else ''}<= {high}"
        raise InvalidInputError(f"{key} must be a number {bounds} (found {value!r}).")
    return number


class SilentReporter:
    """The reporter of a torchrun rank other than 0: rank 0 reports for the job."""

    def event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def metric(self, *args: Any, **kwargs: Any) -> None:
        pass


class NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def jsonable(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value))


def lora_targets(model: Any, settings: Any, vision: bool) -> tuple[Any, list[str], str | None]:
    """(target_modules, modules_to_save, exclude regex): the projector is trained in full, never LoRA'd."""
    import re

    import torch

    projector = []
    if vision:
        for name, _module in model.named_modules():
            if re.search(r"(^|\.)visual\.merger$", name) or re.search(r"(^|\.)deepstack_merger_list\.\d+$", name):
                projector.append(name)
    exclude = r".*(visual\.merger|deepstack_merger_list\.\d+)\..*" if projector else None
    targets = settings.lora_targets
    if targets == "all-linear":
        names = set()
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and not name.endswith("lm_head"):
                if exclude and re.fullmatch(exclude, name):
                    continue
                names.add(name.rsplit(".", 1)[-1])
        return sorted(names), projector, exclude
    wanted = [t for t in targets if t.lower() not in PROJECTOR_ALIASES]
    if not wanted:
        raise InvalidInputError("lora_target_modules names only the projector; add the layers to adapt "
                                "(e.g. q_proj, v_proj) or use 'all-linear'.")
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    unknown = [t for t in wanted if t not in present and not any(n.endswith(t) for n, _ in model.named_modules())]
    if unknown:
        raise InvalidInputError(f"lora_target_modules {unknown} match no layer of {settings.base_model}.",
                                hint="Use 'all-linear', or names such as q_proj, k_proj, v_proj, o_proj, "
                                "gate_proj, up_proj, down_proj.")
    return wanted, projector, exclude


def wrap_lora(model: Any, settings: Any, vision: bool) -> Any:
    from peft import LoraConfig, get_peft_model

    targets, projector, exclude = lora_targets(model, settings, vision)
    config = LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=settings.lora_dropout,
                        target_modules=targets, modules_to_save=projector or None, exclude_modules=exclude,
                        bias="none", task_type="CAUSAL_LM")
    with warnings.catch_warnings():  # peft asks transformers a deprecated question; nothing for a user to do
        warnings.filterwarnings("ignore", category=FutureWarning)
        return get_peft_model(model, config)


def save_final(model: Any, tokenizer: Any, base_path: Path, final_dir: Path, settings: Any, model_id: str,
                summary: dict[str, Any]) -> None:
    from synth_ai.fsutil import publish_folder

    with publish_folder(final_dir) as staging:
        write_model_files(model, tokenizer, base_path, staging, settings, model_id, summary)


def write_model_files(model: Any, tokenizer: Any, base_path: Path, folder: Path, settings: Any, model_id: str,
                      summary: dict[str, Any]) -> None:
    """A fine-tuned model's files into `folder` (which the caller publishes): the weights (LoRA: the adapter only),
    the tokenizer, the base's generation and chat-template files, and the model card."""
    import json
    import shutil

    from synth_ai.backend.ml.loading import MODEL_CARD

    model.save_pretrained(str(folder))  # LoRA: adapter files only; full: the whole model
    tokenizer.save_pretrained(str(folder))
    for extra in ("preprocessor_config.json", "generation_config.json", "chat_template.jinja"):
        source = Path(base_path) / extra
        if source.exists() and not (folder / extra).exists():
            shutil.copy2(source, folder / extra)
    card = {"kind": "fine_tuned", "model_id": model_id, "base_model": settings.base_model,
            "job_id": settings.job_id, "training_kind": settings.mode, **summary,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (folder / MODEL_CARD).write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")


def load_policy(model_store: Any, model_id: str, where: Any, *, keep_adapter: bool = False
                ) -> tuple[Any, Path, str, bool]:
    """(model, folder with its tokenizer, root base model id, started from a LoRA fine-tune) for a base id or a
    fine-tuned id of this backend. A LoRA fine-tune is applied to its base and merged, or with `keep_adapter`
    kept as a trainable adapter."""
    from synth_ai.backend.ml import loading

    path = model_store.resolve(model_id)
    card = loading.read_model_card(path)
    root = str(card.get("base_model") or model_id) if card.get("kind") == "fine_tuned" else model_id
    if card.get("kind") == "fine_tuned" and card.get("training_kind") == "lora":
        from peft import PeftModel

        base = loading.load_model(model_store.resolve(card["base_model"]), where)
        with warnings.catch_warnings():  # a deprecation inside peft; nothing for a user to do
            warnings.filterwarnings("ignore", category=FutureWarning)
            if keep_adapter:
                return PeftModel.from_pretrained(base, str(path), is_trainable=True), path, root, True
            return PeftModel.from_pretrained(base, str(path)).merge_and_unload(), path, root, True
    return loading.load_model(path, where), path, root, False


def is_imported_adapter(model_store: Any, model_id: str) -> bool:
    """Whether `model_id` is a LoRA adapter imported from elsewhere (`store.model_import`): jobs continue it."""
    from synth_ai.backend.ml import loading
    from synth_ai.backend.store.model_store import is_fine_tuned_id

    if not is_fine_tuned_id(model_id):
        return False
    card = loading.read_model_card(model_store.resolve(model_id))
    return bool(card.get("imported_from")) and card.get("training_kind") == "lora"


def imported_adapter_adjustment(model_id: str, model: Any, settings: Any) -> tuple[str, dict[str, Any]]:
    """(message, data) of the `*.config.adjusted` event of a job continuing the imported adapter `model_id` (a
    PeftModel): the adapter's own rank, alpha and target modules apply; `data` holds those that differ from the
    job's LoRA settings (docs/models.md)."""
    config = next(iter(model.peft_config.values()))
    adapter = {"lora_r": int(config.r), "lora_alpha": float(config.lora_alpha),
               "lora_targets": _target_names(config.target_modules)}
    job = {"lora_r": int(settings.lora_r), "lora_alpha": float(settings.lora_alpha),
           "lora_targets": _target_names(settings.lora_targets)}
    message = (f"{model_id} is an imported LoRA adapter: training continues it as LoRA with its own rank, alpha "
               "and target modules (the job's LoRA settings do not apply).")
    return message, {"mode": "lora", **{key: value for key, value in adapter.items() if job[key] != value}}


def _target_names(targets: Any) -> Any:
    """Target modules comparable across peft's set and a job's list; a string ("all-linear", a regex) as it is."""
    return targets if isinstance(targets, str) else sorted(targets or [])


def vision_base_folder(model_store: Any, path: Path) -> Path:
    """The folder whose config says whether a model is Qwen3-VL (a LoRA adapter folder has no config)."""
    from synth_ai.backend.ml import loading

    card = loading.read_model_card(path)
    if card.get("kind") == "fine_tuned" and card.get("training_kind") == "lora":
        return Path(model_store.resolve(card["base_model"]))
    return Path(path)


def decoder_inputs(batch: dict[str, Any], *, image_pad: int | None, vision_dtype: Any) -> dict[str, Any]:
    """The decoder's arguments for rows of prompt + completion (SFT and RL alike), with a Qwen3-VL row's images:
    pixel values in the vision tower's dtype and the image-token mask."""
    import torch

    kwargs: dict[str, Any] = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                              "use_cache": False}
    if "pixel_values" in batch:
        kwargs["pixel_values"] = batch["pixel_values"].to(vision_dtype) if vision_dtype else batch["pixel_values"]
        kwargs["image_grid_thw"] = batch["image_grid_thw"]
        if image_pad is not None:
            kwargs["mm_token_type_ids"] = (batch["input_ids"] == image_pad).to(torch.int32)
    return kwargs

