"""Where an SFT job trains: the model's folders, whether it is Qwen3-VL, the torch threads, the device, and whether
the step runs in bf16."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.backend.trainers.sft.sft_settings import Settings


@dataclass(frozen=True)
class Runtime:
    model_path: Path  # the model trained from: a base model, or a fine-tune of this backend
    base_path: Path  # the folder whose config describes the model (a LoRA fine-tune's base)
    vision: bool
    threads: int
    where: Any  # loading.Placement: device and preferred dtype
    use_bf16: bool

    @property
    def dtype_name(self) -> str:
        return "bf16" if self.use_bf16 else "fp32"


def choose_runtime(settings: Settings, model_store: Any) -> Runtime:
    """Also sets the torch thread count (one thread for tiny models on CPU unless OMP_NUM_THREADS says otherwise)
    and notes in `settings` a bf16 request no GPU here can honour."""
    import torch

    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.common import vision_base_folder

    model_path = model_store.resolve(settings.base_model)
    base_path = vision_base_folder(model_store, model_path)
    threads = loading.configure_threads(tiny=loading.is_tiny_folder(base_path))
    vision = loading.is_vision_folder(base_path)
    where = loading.placement()
    use_bf16 = where.device == "cuda" and where.dtype == torch.bfloat16 and settings.bf16 is not False
    if settings.bf16 and not use_bf16:
        settings.notes.append("bf16 was requested but no CUDA GPU with bf16 support is present: training in fp32.")
    return Runtime(model_path, base_path, vision, threads, where, use_bf16)
