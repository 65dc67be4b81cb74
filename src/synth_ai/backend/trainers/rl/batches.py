"""Samples -> padded tensors, and the policy's log-probs of the sampled completion tokens.

A row is prompt ids + completion ids exactly as sampled (never re-tokenised), right-padded; the loss mask covers
the completion tokens the policy sampled (thinking tokens and the end-of-turn token included); tokens the engine
forced (a `</think>` the thinking budget imposed) stay in the sequence as context but carry no loss.
The decoder runs once per micro-batch (when samples share a prompt, each distinct prompt runs once and the
completions run on its cache: `shared_prompts`); the LM head and log-softmax run only on the positions that predict
a completion token, at the sampling temperature, so the on-policy ratio is exactly the ratio of what was sampled,
and in vocabulary blocks (`ml.token_logprobs`) unless `[training].chunked_logprobs` is false.
Rows with images (Qwen3-VL) go one per micro-batch with their `pixel_values` / `image_grid_thw`.
"""

from __future__ import annotations

from typing import Any

from synth_ai.backend.trainers.common import decoder_inputs
from synth_ai.backend.trainers.rl.shared_prompts import predicting_hidden, shared_layout
from synth_ai.backend.trainers.rl.types import Sample


def micro_batches(samples: list[Sample], max_samples: int, max_tokens: int | None = None) -> list[list[Sample]]:
    """Groups of similar lengths in a fixed order, each within both limits: at most `max_samples` samples and, laid
    out as padded rows of prompt + completion, at most `max_tokens` tokens (rows x the longest row; the shared
    layout runs fewer). A sample longer than `max_tokens` runs alone (a sequence is never split), as does a row
    with images."""
    order = sorted(range(len(samples)), key=lambda i: (bool(samples[i].vision_inputs), samples[i].length, i))
    out: list[list[Sample]] = []
    current: list[Sample] = []
    for i in order:
        sample = samples[i]
        if sample.vision_inputs:
            out.append([sample])
            continue
        # sorted by length: the new sample is the group's longest row, so the group's padded size is count x its own
        if current and max_tokens is not None and (len(current) + 1) * sample.length > max_tokens:
            out.append(current)
            current = []
        current.append(sample)
        if len(current) >= max_samples:
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


def collate(samples: list[Sample], pad_id: int, device: str, *, share_prompts: bool = True) -> dict[str, Any]:
    """Tensors for `completion_logprobs`: the shared-prompt layout (`shared_prompts`) where samples share a prompt
    (unless `share_prompts` is False), else one row of prompt + completion per sample."""
    import torch

    shared = shared_layout(samples, pad_id) if share_prompts else None
    width = max(s.length for s in samples)
    completion = max(len(s.completion_ids) for s in samples)
    # built as Python lists and converted once (a tensor per row and field costs more than the rest together)
    ids, attention, targets, positions, old, sampler, mask = [], [], [], [], [], [], []
    for s in samples:
        n, rest = len(s.completion_ids), completion - len(s.completion_ids)
        if shared is None:  # the full rows (the shared layout has its own)
            tokens = s.prompt_ids + s.completion_ids
            ids.append(tokens + [pad_id] * (width - len(tokens)))
            attention.append([1] * len(tokens) + [0] * (width - len(tokens)))
            start = len(s.prompt_ids) - 1  # where each target is predicted
            positions.append(list(range(start, start + n)) + [0] * rest)
        targets.append(list(s.completion_ids) + [0] * rest)
        old.append(list(s.old_logprobs[:n]) + [0.0] * (completion - len(s.old_logprobs[:n])))
        recorded = s.sampler_logprobs or s.old_logprobs
        sampler.append(list(recorded[:n]) + [0.0] * (completion - len(recorded[:n])))
        forced = list(s.forced[:n]) + [False] * (n - len(s.forced[:n]))
        # forced by the engine, not sampled: context, not trained
        mask.append([0.0 if f else 1.0 for f in forced] + [0.0] * rest)
    batch = {"targets": torch.tensor(targets, dtype=torch.long),
             "old_logprobs": torch.tensor(old, dtype=torch.float32),
             "sampler_logprobs": torch.tensor(sampler, dtype=torch.float32),
             "mask": torch.tensor(mask, dtype=torch.float32),
             "advantages": torch.tensor([s.advantage for s in samples], dtype=torch.float32),
             "temperature": torch.tensor([s.temperature for s in samples], dtype=torch.float32)}
    if shared is None:
        batch.update({"input_ids": torch.tensor(ids, dtype=torch.long),
                      "attention_mask": torch.tensor(attention, dtype=torch.long),
                      "positions": torch.tensor(positions, dtype=torch.long)})
    else:
        batch.update(shared)
    if len(samples) == 1 and samples[0].vision_inputs:
        batch.update(samples[0].vision_inputs)
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}


def completion_logprobs(decoder: Any, lm_head: Any, batch: dict[str, Any], *, image_pad: int | None = None,
                        vision_dtype: Any = None, autocast: Any = None, chunked: bool = True) -> Any:
    """[rows, completion] log-probs of the target tokens under the model (0 where the mask is 0). `chunked`: through
    `ml.token_logprobs` in vocabulary blocks (no [tokens, vocabulary] logits); False: the materialised logits
    (`[training].chunked_logprobs = false`)."""
    import torch

    from synth_ai.backend.ml.token_logprobs import lm_head_scores

    context = autocast if autocast is not None else torch.autocast("cpu", enabled=False)
    selected = batch["mask"] > 0
    # dividing by 1 changes nothing: skip it (and its backward)
    temperature = (batch["temperature"].unsqueeze(1).expand_as(batch["mask"])[selected]
                   if bool((batch["temperature"] != 1.0).any()) else None)
    with context:
        if "prefix_ids" in batch:
            picked = predicting_hidden(decoder, batch)[selected]
        else:
            hidden = decoder(**decoder_inputs(batch, image_pad=image_pad, vision_dtype=vision_dtype)).last_hidden_state
            rows = torch.arange(hidden.shape[0], device=hidden.device).unsqueeze(1).expand_as(batch["positions"])
            picked = hidden[rows[selected], batch["positions"][selected]]
        values = lm_head_scores(lm_head, picked, batch["targets"][selected], temperature, chunked=chunked).logprobs
    out = torch.zeros_like(batch["old_logprobs"])
    out[selected] = values
    return out
