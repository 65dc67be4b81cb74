"""An SFT job's inputs: the tokenizer (and Qwen3-VL's image processor), and the training and validation files
read into tokenized examples, with the events that say what reading changed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.backend.trainers.runtime import Runtime
from synth_ai.backend.trainers.sft.sft_settings import Reporter, Settings
from synth_ai.errors import InvalidInputError


@dataclass
class TrainingData:
    tokenizer: Any
    pixels: Any  # a PixelLoader on Qwen3-VL, else None
    train: list[Any]
    val: list[Any]
    train_stats: Any  # what encoding the training file counted (tokens, label tokens, ...)
    prep_s: float

    @property
    def pad_id(self) -> int:
        tokenizer = self.tokenizer
        return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def device_batch(self, examples: list[Any], device: str) -> dict[str, Any]:
        """`examples` padded into one micro-batch, its tensors on `device`."""
        from synth_ai.backend.trainers.sft.data import collate

        batch = collate(examples, self.pad_id, self.pixels)
        return {k: (v.to(device, non_blocking=True) if hasattr(v, "to") else v) for k, v in batch.items()}


def read_training_data(settings: Settings, runtime: Runtime, train_path: Path, val_path: Path | None,
                       reporter: Reporter) -> TrainingData:
    from synth_ai.backend.ml import loading
    from synth_ai.backend.ml.images import env_flag
    from synth_ai.backend.ml.templates import training_template
    from synth_ai.backend.trainers.sft.data import Encoder, PixelLoader, data_events, read_examples

    tokenizer = loading.load_tokenizer(runtime.model_path)
    processor = _vision_processor(settings, runtime, tokenizer, reporter) if runtime.vision else None
    allow_remote = env_flag("SYNTH_TRAINING_ALLOW_REMOTE_IMAGES")
    pixels = PixelLoader(processor.image_processor, allow_remote) if processor is not None else None
    template = training_template(runtime.vision)

    def encoder() -> Encoder:
        return Encoder(tokenizer, template, processor=processor, sequence_length=settings.sequence_length,
                       max_images_per_message=settings.max_images_per_message, allow_remote_images=allow_remote)

    prep_started = time.perf_counter()
    train_encoder = encoder()
    train = read_examples(train_path, train_encoder, model_id=settings.base_model)
    data_events(reporter, "training", train_encoder.stats, settings)
    if not train:
        raise InvalidInputError(f"{train_path}: no example has an assistant token to learn from.",
                                hint="Each record needs at least one assistant message (within sequence_length).")
    val: list[Any] = []
    if val_path is not None:
        val_encoder = encoder()
        val = read_examples(val_path, val_encoder, model_id=settings.base_model)
        data_events(reporter, "validation", val_encoder.stats, settings)
    return TrainingData(tokenizer, pixels, train, val, train_encoder.stats, time.perf_counter() - prep_started)


def _vision_processor(settings: Settings, runtime: Runtime, tokenizer: Any, reporter: Reporter) -> Any:
    """Qwen3-VL's processor; fills in the registry's image limit and trains one example per micro-batch (the
    effective batch kept through gradient accumulation)."""
    from synth_ai.backend.ml import loading

    processor = loading.build_processor(tokenizer, loading.load_image_processor(runtime.base_path))
    if settings.max_images_per_message is None:
        settings.max_images_per_message = _registry_image_limit(settings.base_model)
    if settings.per_device_batch > 1:
        old = settings.per_device_batch
        settings.gradient_accumulation_steps *= old
        settings.per_device_batch = 1
        reporter.event("sft.config.adjusted",
                       f"Qwen3-VL trains one example per micro-batch: per_device_batch {old} -> 1, "
                       f"gradient_accumulation_steps -> {settings.gradient_accumulation_steps} (same effective "
                       "batch).",
                       {"per_device_batch": 1, "gradient_accumulation_steps": settings.gradient_accumulation_steps})
    return processor


def _registry_image_limit(model_id: str) -> int:
    from synth_ai.models.registry import find_model

    info = find_model(model_id)
    return (info.max_images_per_message if info and info.max_images_per_message else 1)
