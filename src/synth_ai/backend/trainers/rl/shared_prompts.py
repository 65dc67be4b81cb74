"""Training forwards that run each distinct prompt once: an RL group's `group_size` completions share one prompt.

Why: GSPO trains on every completion of a group, and all of them follow the same prompt. Running prompt +
completion as one row per sample repeats the prompt's forward (and backward) `group_size` times; with long prompts
(a multi-turn agent's observation, a system prompt with tools) most of the update is that repetition. Here the
distinct prompts run once (left-padded, with a KV cache kept in the autograd graph), the cache is expanded to the
samples' rows, and the completions run on top of it (right-padded). Gradients reach the prompt's keys and values
through the expansion, summed over the rows that share it: the same gradient as the one-row-per-sample forward, up
to float rounding (attention over a cache sums in another order).

`shared_layout(samples, pad_id)` gives the tensors (None when no two samples share a prompt, or a sample has
images: those keep the plain layout); `predicting_hidden(decoder, batch)` gives, for every completion position,
the hidden state that predicts it: the prompt's last one for the first token, the completion's own before it for
the others. With activation checkpointing the prompt's layers are checkpointed like the completions' (the prompt
stays in the graph: computing it without gradient would change the update), and the two caches give a layer
replayed in backward the same keys and values (`_replay_safe_layers`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from synth_ai.backend.ml.loading import cache_argument
from synth_ai.backend.trainers.rl.types import Sample


def shared_layout(samples: list[Sample], pad_id: int) -> dict[str, Any] | None:
    import torch

    if any(s.vision_inputs for s in samples):
        return None
    distinct: dict[tuple[int, ...], int] = {}
    which = [distinct.setdefault(tuple(s.prompt_ids), len(distinct)) for s in samples]
    if len(distinct) == len(samples):
        return None
    width = max(len(p) for p in distinct)
    prefix_ids, prefix_mask = [], []
    for prompt in distinct:  # left-padded: every prompt ends in the last column, where the completions start
        pad = width - len(prompt)
        prefix_ids.append([pad_id] * pad + list(prompt))
        prefix_mask.append([0] * pad + [1] * len(prompt))
    completion = max(len(s.completion_ids) for s in samples)
    ids, positions = [], []
    for s in samples:
        n = len(s.completion_ids)
        ids.append(list(s.completion_ids) + [pad_id] * (completion - n))
        positions.append(list(range(len(s.prompt_ids), len(s.prompt_ids) + completion)))
    prefix_mask_t = torch.tensor(prefix_mask, dtype=torch.long)
    which_t = torch.tensor(which, dtype=torch.long)
    completion_mask = torch.tensor([[1] * len(s.completion_ids) + [0] * (completion - len(s.completion_ids))
                                    for s in samples], dtype=torch.long)
    return {"prefix_ids": torch.tensor(prefix_ids, dtype=torch.long), "prefix_mask": prefix_mask_t,
            "prefix_positions": (prefix_mask_t.cumsum(1) - 1).clamp(min=0), "prefix_rows": which_t,
            "completion_ids": torch.tensor(ids, dtype=torch.long),
            # the completions attend to their prompt's columns (padding masked) and to their own tokens
            "completion_attention": torch.cat([prefix_mask_t.index_select(0, which_t), completion_mask], dim=1),
            "completion_positions": torch.tensor(positions, dtype=torch.long)}


def predicting_hidden(decoder: Any, batch: dict[str, Any]) -> Any:
    """(rows, completion, hidden): the hidden state that predicts each completion token."""
    import torch
    from transformers.cache_utils import Cache

    from synth_ai.backend.trainers.activation_checkpointing import decoder_layers

    prompt_layer, completion_layer = _replay_safe_layers()
    prompt_cache = Cache(layers=[prompt_layer() for _ in decoder_layers(decoder)])
    prefix = decoder(input_ids=batch["prefix_ids"], attention_mask=batch["prefix_mask"],
                     position_ids=batch["prefix_positions"], **cache_argument(prompt_cache),
                     use_cache=True).last_hidden_state
    rows = batch["prefix_rows"]
    # each sample's row takes its prompt's keys and values (differentiable: the prompt's gradient flows back)
    completion_cache = Cache(layers=[completion_layer(layer.keys.index_select(0, rows),
                                                      layer.values.index_select(0, rows))
                                     for layer in prompt_cache.layers])
    hidden = decoder(input_ids=batch["completion_ids"], attention_mask=batch["completion_attention"],
                     position_ids=batch["completion_positions"], **cache_argument(completion_cache),
                     use_cache=True).last_hidden_state
    first = prefix[:, -1, :].index_select(0, rows).unsqueeze(1)
    return torch.cat([first, hidden[:, :-1, :]], dim=1)


@lru_cache(maxsize=1)
def _replay_safe_layers() -> tuple[type, type]:
    """(prompt layer, completion layer): KV cache layers that give the same answer when a checkpointed decoder layer
    (`trainers.activation_checkpointing`) runs again in backward with the same cache; transformers' own layers would
    append its keys a second time. Built on first use: transformers is imported only by the trainer."""
    import torch
    from transformers.cache_utils import DynamicLayer

    class PromptLayer(DynamicLayer):
        """Keeps the first keys and values it is given (the prompt's); a replay gets its own back, not stored."""

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.keys, self.values = key_states, value_states
            return key_states, value_states

    class CompletionLayer(DynamicLayer):
        """The prompt's keys and values for each row; a completion's own are joined to them, never stored."""

        def __init__(self, keys: Any, values: Any) -> None:
            super().__init__()
            self.lazy_initialization(keys, values)
            self.keys, self.values = keys, values

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)

    return PromptLayer, CompletionLayer
