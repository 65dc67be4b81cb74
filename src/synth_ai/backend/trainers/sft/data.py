"""SFT data: read JSONL records, render them with the training chat template, tokenize, mask, truncate, batch.

Records come from the shared streaming reader (`synth_ai.datasets.iter_normalized_records`), so the backend reads
a file with exactly the rules the client validated it with. Each record becomes an `Example`:

- the conversation is rendered with the family's training template (`ml/templates.py`); the template's generation
  markers give the character spans of assistant output, and token offsets turn them into labels: every token
  outside an assistant span is `-100`, so the loss is taken on assistant tokens only (reasoning, text, tool calls
  and the closing `<|im_end|>`);
- for Qwen3-VL, images are decoded (`ml/images.py`) and the image-only Qwen3-VL processor expands each
  `<|image_pad|>` into the right number of patch tokens; images past `max_images_per_message` in a message are
  dropped first (counted for an event). An example keeps its image *references* and grid sizes, not pixels:
  `pixel_values` are rebuilt per batch (`PixelLoader`), so memory follows the dataset file, not its decoded
  images (a 512x512 image is ~6 MB of float patches);
- `sequence_length` truncates from the right; for VL a cut never splits an image: the image it would split and
  every later one are dropped with their tokens. Examples left with no assistant token are skipped (counted).

Batches are length-grouped: examples are shuffled per epoch (seeded), sorted by length inside windows of 64
batches and cut into batches, so padding stays small without a fixed order.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.backend.ml.images import image_url_of, load_image
from synth_ai.errors import InvalidInputError

IGNORE = -100
_SORT_WINDOW = 64


@dataclass
class Example:
    input_ids: list[int]
    labels: list[int]
    line: int
    image_urls: list[str] | None = None  # VL: the images (data/http URLs) whose tokens are in input_ids
    image_grid_thw: Any = None  # torch.Tensor [images, 3], from the processor

    @property
    def length(self) -> int:
        return len(self.input_ids)

    @property
    def label_tokens(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE)


@dataclass
class DataStats:
    records: int = 0
    examples: int = 0
    tokens: int = 0
    label_tokens: int = 0
    truncated: int = 0
    skipped_no_labels: int = 0
    images: int = 0
    images_dropped: int = 0
    records_with_dropped_images: int = 0
    truncated_lines: list[int] = field(default_factory=list)
    max_length: int = 0


def render(messages: list[dict[str, Any]], tools: list[Any] | None, template: str) -> tuple[str, list[tuple[int, int]]]:
    """Render one conversation; returns the text and the character spans of assistant output."""
    from transformers.utils.chat_template_utils import render_jinja_template

    texts, spans = render_jinja_template([messages], tools=tools or None, chat_template=template,
                                         return_assistant_tokens_mask=True)
    return texts[0], [tuple(s) for s in spans[0]]


def mask_from_spans(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[bool]:
    """True for every token whose characters overlap an assistant span (zero-width tokens never do)."""
    if not spans:
        return [False] * len(offsets)
    starts = [s for s, _ in spans]
    out = []
    for start, end in offsets:
        if end <= start:
            out.append(False)
            continue
        i = bisect.bisect_right(starts, start) - 1
        hit = False
        for j in (i, i + 1):
            if 0 <= j < len(spans) and spans[j][0] < end and spans[j][1] > start:
                hit = True
                break
        out.append(hit)
    return out


def _shift_spans(spans: list[tuple[int, int]], replacements: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Move character spans past placeholders the processor expanded before them."""
    if not replacements:
        return spans
    ends = [r["span"][1] for r in replacements]
    gained = [0] + [r["new_span"][1] - r["span"][1] for r in replacements]  # cumulative growth up to each one
    out = []
    for start, end in spans:
        out.append((start + gained[bisect.bisect_right(ends, start)], end + gained[bisect.bisect_right(ends, end)]))
    return out


class Encoder:
    """Turns normalised records into `Example`s for one model (text or VL)."""

    def __init__(self, tokenizer: Any, template: str, *, processor: Any = None, sequence_length: int | None = None,
                 max_images_per_message: int | None = None, allow_remote_images: bool = False) -> None:
        self.tokenizer = tokenizer
        self.template = template
        self.processor = processor
        self.vision = processor is not None
        self.sequence_length = sequence_length
        self.max_images = max_images_per_message
        self.allow_remote = allow_remote_images
        self.stats = DataStats()
        ids = tokenizer.convert_tokens_to_ids
        self.image_pad = ids("<|image_pad|>")
        self.vision_start = ids("<|vision_start|>")
        merge = getattr(getattr(processor, "image_processor", None), "merge_size", 2) if processor else 2
        self.merge_area = merge * merge

    # One record -------------------------------------------------------------------------------------------------
    def encode(self, record: dict[str, Any], line: int, where: str) -> Example | None:
        stats = self.stats
        stats.records += 1
        messages = [dict(m) for m in record.get("messages") or []]
        images: list[Any] = []
        urls: list[str] = []
        if self.vision:
            if self.max_images is not None:
                from synth_ai.datasets import trim_images

                messages, dropped = trim_images(messages, self.max_images)
                if dropped:
                    stats.images_dropped += dropped
                    stats.records_with_dropped_images += 1
            messages, images, urls = self._collect_images(messages, f"{where}: line {line}")
            stats.images += len(images)
        else:
            for i, message in enumerate(messages):
                content = message.get("content")
                if isinstance(content, list) and any(image_url_of(p) is not None for p in content):
                    raise InvalidInputError(
                        f"{where}: line {line}: message {i} has image content, but the model is text-only.",
                        hint="Train a Qwen3-VL model on multimodal data, or remove the image parts.")
        for message in messages:
            if message.get("reasoning") and not message.get("reasoning_content"):
                message["reasoning_content"] = message["reasoning"]
        text, spans = render(messages, record.get("tools"), self.template)
        if self.vision and images:
            batch = self.processor(text=[text], images=images, return_offsets_mapping=True,
                                   return_text_replacement_offsets=True, return_tensors="pt")
            input_ids = batch["input_ids"][0].tolist()
            offsets = [tuple(o) for o in batch["offset_mapping"][0].tolist()]
            replacements = (batch.get("text_replacement_offsets") or [[]])[0]
            spans = _shift_spans(spans, replacements)
            grid = batch["image_grid_thw"]
        else:
            enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            input_ids, offsets = enc["input_ids"], enc["offset_mapping"]
            grid = None
        mask = mask_from_spans(offsets, spans)
        labels = [tok if m else IGNORE for tok, m in zip(input_ids, mask)]
        example = Example(input_ids=input_ids, labels=labels, line=line, image_urls=urls if grid is not None else None,
                          image_grid_thw=grid)
        if self.sequence_length and example.length > self.sequence_length:
            stats.truncated += 1
            if len(stats.truncated_lines) < 20:
                stats.truncated_lines.append(line)
            example = self._truncate(example, self.sequence_length)
        if example.label_tokens == 0:
            stats.skipped_no_labels += 1
            return None
        stats.examples += 1
        stats.tokens += example.length
        stats.label_tokens += example.label_tokens
        stats.max_length = max(stats.max_length, example.length)
        return example

    def _collect_images(self, messages: list[dict[str, Any]],
                        where: str) -> tuple[list[dict[str, Any]], list[Any], list[str]]:
        images: list[Any] = []
        urls: list[str] = []
        out = []
        for i, message in enumerate(messages):
            content = message.get("content")
            if isinstance(content, list):
                parts = []
                for j, part in enumerate(content):
                    url = image_url_of(part)
                    if url is None:
                        parts.append(part)
                        continue
                    images.append(load_image(url, allow_remote=self.allow_remote,
                                             where=f"{where}: message {i} part {j}"))
                    urls.append(url)
                    parts.append({"type": "image"})
                message = {**message, "content": parts}
            out.append(message)
        return out, images, urls

    def _truncate(self, example: Example, limit: int) -> Example:
        ids, labels = example.input_ids[:limit], example.labels[:limit]
        if example.image_grid_thw is None:
            return Example(ids, labels, example.line)
        # Keep only images whose every pad token survived the cut; cut before the first one that did not.
        grid = example.image_grid_thw
        per_image = [int(g.prod()) // self.merge_area for g in grid]
        keep, cut = 0, limit
        position = 0
        for count in per_image:
            start = example.input_ids.index(self.image_pad, position)
            end = start + count
            if end > limit:
                vs = start - 1 if start > 0 and example.input_ids[start - 1] == self.vision_start else start
                cut = min(limit, vs)
                break
            keep += 1
            position = end
        ids, labels = example.input_ids[:cut], example.labels[:cut]
        if keep == 0:
            return Example(ids, labels, example.line)
        return Example(ids, labels, example.line, (example.image_urls or [])[:keep], grid[:keep])


def read_examples(path: Path, encoder: Encoder, *, model_id: str | None) -> list[Example]:
    """Every usable example of a JSONL file (shared reader; invalid lines raise with file and line)."""
    from synth_ai.datasets import iter_normalized_records

    registry_model = _registry_id(model_id)
    examples = []
    # Trimming happens in the encoder (so it can be counted): the reader is told not to trim.
    for line, record in iter_normalized_records(path, model=registry_model, min_messages=1,
                                                max_images_per_message=10**6 if encoder.vision else None):
        example = encoder.encode(record, line, str(path))
        if example is not None:
            examples.append(example)
    return examples


def _registry_id(model_id: str | None) -> str | None:
    if not model_id:
        return None
    from synth_ai.models.registry import find_model

    info = find_model(model_id)
    return info.id if info is not None else None


# Batching ---------------------------------------------------------------------------------------------------------
def epoch_batches(lengths: list[int], batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """Length-grouped batches for one epoch: seeded shuffle, sort inside windows, shuffle the batch order."""
    rng = random.Random(seed * 1_000_003 + epoch)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = batch_size * _SORT_WINDOW
    batches: list[list[int]] = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start:start + window], key=lambda i: lengths[i])
        batches.extend(chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


class PixelLoader:
    """Rebuilds `pixel_values` for a batch from the examples' image references (same processor, same grids)."""

    def __init__(self, image_processor: Any, allow_remote: bool) -> None:
        self.image_processor = image_processor
        self.allow_remote = allow_remote

    def __call__(self, examples: list[Example]) -> tuple[Any, Any]:
        import torch

        images = [load_image(url, allow_remote=self.allow_remote, where=f"line {e.line}")
                  for e in examples for url in (e.image_urls or [])]
        out = self.image_processor(images=images, return_tensors="pt")
        expected = torch.cat([e.image_grid_thw for e in examples if e.image_urls], dim=0)
        if not torch.equal(out["image_grid_thw"], expected):  # pragma: no cover - a processor that is not pure
            raise RuntimeError("image preprocessing changed between encoding and training")
        return out["pixel_values"], expected


def collate(examples: list[Example], pad_id: int, pixels: PixelLoader | None = None) -> dict[str, Any]:
    """Right-padded tensors. Text rows get no attention mask: under causal attention a real token sees only the
    positions before it, all real, so the padding after it changes nothing it computes (and the padding's own
    positions carry no label). Without a mask SDPA runs its causal kernel, which skips the masked half of every
    score matrix: 5-7% of a mid-size model's step on CPU. Qwen3-VL rows (`pixels` given) keep one when their
    lengths differ: its rope positions are computed from it."""
    import torch

    width = max(e.length for e in examples)
    rows = len(examples)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    labels = torch.full((rows, width), IGNORE, dtype=torch.long)
    ragged = pixels is not None and any(e.length != width for e in examples)
    attention = torch.zeros((rows, width), dtype=torch.long) if ragged else None
    for r, e in enumerate(examples):
        input_ids[r, :e.length] = torch.tensor(e.input_ids, dtype=torch.long)
        labels[r, :e.length] = torch.tensor(e.labels, dtype=torch.long)
        if attention is not None:
            attention[r, :e.length] = 1
    batch: dict[str, Any] = {"input_ids": input_ids, "labels": labels, "attention_mask": attention,
                             "tokens": sum(e.length for e in examples)}
    if pixels is not None and any(e.image_urls for e in examples):
        batch["pixel_values"], batch["image_grid_thw"] = pixels(examples)
    return batch


def data_events(reporter: Any, split: str, stats: Any, settings: Any) -> None:
    """Warnings about what reading a split changed: truncated examples, dropped images, skipped examples."""
    if stats.truncated:
        reporter.event("sft.data.truncated",
                       f"{stats.truncated} {split} example(s) were longer than "
                       f"sequence_length={settings.sequence_length} and were truncated.",
                       {"split": split, "truncated": stats.truncated, "sequence_length": settings.sequence_length,
                        "examples": stats.records, "lines": stats.truncated_lines}, level="warning")
    if stats.images_dropped:
        reporter.event("sft.data.images_dropped",
                       f"{stats.images_dropped} image(s) in {stats.records_with_dropped_images} {split} record(s) "
                       f"exceeded max_images_per_message={settings.max_images_per_message} and were dropped.",
                       {"split": split, "images_dropped": stats.images_dropped,
                        "records": stats.records_with_dropped_images,
                        "max_images_per_message": settings.max_images_per_message}, level="warning")
    if stats.skipped_no_labels:
        reporter.event("sft.data.skipped",
                       f"{stats.skipped_no_labels} {split} example(s) had no assistant token left and were skipped.",
                       {"split": split, "skipped": stats.skipped_no_labels}, level="warning")
