"""Where a training job runs and the policy it trains, chosen once for SFT and RL alike: the model's folders,
whether it is Qwen3-VL, the torch threads, the device, bf16, and the policy loaded from a base, a fine-tune or an
imported adapter, with LoRA added.

One precision rule: the step runs under bf16 autocast when the device is a CUDA GPU that supports bf16, unless the
job turns bf16 off (SFT's `[hyperparameters.parallelism].bf16 = false`; RL has no such key); a bf16 request no GPU
here can honour is noted. A LoRA job loads its frozen base in bf16 then; everything else loads in fp32.

One difference between the trainers is a parameter, not a copy: an imported LoRA adapter is continued as that
adapter by SFT whatever its mode, and by RL in LoRA mode only (`full_mode_merges_adapter`: RL's full mode trains
it merged into its base, docs/models.md). torch/peft are imported lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Runtime:
    model_path: Path  # the model trained from: a base model, or a fine-tune of this backend
    base_path: Path  # the folder whose config describes the model (a LoRA fine-tune's base)
    vision: bool
    tiny: bool
    threads: int
    where: Any  # loading.Placement: device and preferred dtype
    use_bf16: bool

    @property
    def dtype_name(self) -> str:
        return "bf16" if self.use_bf16 else "fp32"

    def load_dtype(self, mode: str) -> Any:
        """The dtype the policy's weights load in: a LoRA base in bf16 when the step runs in bf16, else fp32."""
        import torch

        return torch.bfloat16 if (self.use_bf16 and mode == "lora") else torch.float32


def choose_runtime(model_store: Any, model_id: str, *, bf16: bool | None = None,
                   notes: list[str] | None = None) -> Runtime:
    """Also sets the torch thread count (one thread for tiny models on CPU unless OMP_NUM_THREADS says otherwise);
    `bf16` is the job's request (None: unsaid), and a request no GPU here can honour is appended to `notes`."""
    import torch

    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.common import vision_base_folder

    model_path = model_store.resolve(model_id)
    base_path = vision_base_folder(model_store, model_path)
    tiny = loading.is_tiny_folder(base_path)
    threads = loading.configure_threads(tiny=tiny)
    vision = loading.is_vision_folder(base_path)
    where = loading.placement()
    use_bf16 = where.device == "cuda" and where.dtype == torch.bfloat16 and bf16 is not False
    if bf16 and not use_bf16 and notes is not None:
        notes.append("bf16 was requested but no CUDA GPU with bf16 support is present: training in fp32.")
    return Runtime(model_path, base_path, vision, tiny, threads, where, use_bf16)


@dataclass
class LoadedPolicy:
    model: Any  # LoRA not added yet (`with_lora`)
    tokenizer_path: Path  # the folder holding its tokenizer
    root_base: str  # the base model at the root of the model trained from
    from_lora: bool  # started from a LoRA fine-tune
    continued_adapter: bool  # an imported LoRA adapter, kept as a trainable adapter
    # the `*.config.adjusted` event of a continued adapter: (message, the adapter's values that differ from the job's)
    adjustment: tuple[str, dict[str, Any]] | None


def load_trainable_policy(model_store: Any, model_id: str, runtime: Runtime, settings: Any, *, seed: int,
                          full_mode_merges_adapter: bool, device: str | None = None) -> LoadedPolicy:
    """The policy `model_id` in the runtime's load dtype, on `device` (default: the runtime's), after seeding
    torch with `seed` (LoRA's initial weights come from it). `settings` gives `mode` and the LoRA settings."""
    import torch

    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.common import imported_adapter_adjustment, is_imported_adapter, load_policy

    torch.manual_seed(seed)
    continued = is_imported_adapter(model_store, model_id) and (
        settings.mode == "lora" or not full_mode_merges_adapter)
    where = loading.Placement(device or runtime.where.device, runtime.load_dtype(settings.mode))
    model, tokenizer_path, root_base, from_lora = load_policy(model_store, model_id, where, keep_adapter=continued)
    adjustment = imported_adapter_adjustment(model_id, model, settings) if continued else None
    return LoadedPolicy(model, Path(tokenizer_path), root_base, from_lora, continued, adjustment)


def with_lora(policy: LoadedPolicy, settings: Any, runtime: Runtime) -> Any:
    """The policy's model with a fresh LoRA adapter in LoRA mode (a continued adapter trains as it is)."""
    from synth_ai.backend.trainers.common import wrap_lora

    if settings.mode == "lora" and not policy.continued_adapter:
        return wrap_lora(policy.model, settings, runtime.vision)
    return policy.model


def sampling_dtype(mode: str, use_bf16: bool) -> Any:
    """The dtype the built-in engine samples in, None for the trainer's own weights: bf16 for a full fine-tune that
    trains under bf16 autocast (a CUDA GPU), whose fp32 weights would make every decoding step read twice the bytes;
    a LoRA job's base is loaded in bf16 there already, and the CPU samples in fp32 (docs/decisions.md)."""
    import torch

    return torch.bfloat16 if use_bf16 and mode == "full" else None


def reference_placement(policy_device: str, use_bf16: bool, reference_device: str) -> tuple[str, Any]:
    """(device, dtype) of a full fine-tune's KL reference copy (`rl.reference`'s module doc)."""
    import torch

    device = "cpu" if reference_device == "cpu" else policy_device
    return device, torch.bfloat16 if use_bf16 else torch.float32
