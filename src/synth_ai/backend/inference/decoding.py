"""Continuous batching: a running batch of text rows that new requests join, and finished rows leave, between steps.

`RunningBatch(loaded)` holds one model's rows in flight. `admit(rows, prompts)` prefills the new rows (left-padded,
one forward with a fresh KV cache; rows with the same prompt share one prefilled row), samples their first token,
and merges their cache into the running one; `step()` feeds every live row its pending token (one forward) and
samples its next one. Both return the rows that ended (end-of-turn or the row's own end tokens, its `max_tokens`, or
a stop string in its text), which leave the batch at once.

Forwards go through `lean_forward` where the model allows (Qwen3 text decoders: the same numbers without
`transformers`' per-call overhead), else through the model itself.

KV cache design: one cache for the whole batch (`lean_forward.KVCache`, or a `DynamicCache`), left-padded. Rows are
aligned at the right edge: a row's cached tokens sit in the last columns, padding (attention mask 0) before them.
Merging pads the shorter cache on the left (zeros, masked) and concatenates along the batch axis; retiring selects
the kept rows and drops the leading columns no kept row uses any more, so the cache never grows with the rows that
left. Each row carries its own position counter (positions count its real tokens only), so a row computes what it
would alone; padding is masked.

Sampling is `generation.draw` with each row's own uniforms (from its own seeded generator, indexed by the row's
own step), temperature, top-k and top-p; a row samples the same tokens whatever batch it is in. The thinking budget
is counted per row (tokens after the last open `<think>`, the prompt's included, as `generation.ThinkingBudget`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synth_ai.backend.inference.generation import Row, draw
from synth_ai.backend.inference.lean_forward import KVCache, lean_decoder
from synth_ai.backend.ml.loading import cache_argument


@dataclass(eq=False)
class LiveRow:
    row: Row
    owner: Any  # the batcher's job this row belongs to
    uniforms: Any  # the row's draws, one per step: float64 values (a list, or a tensor (max_tokens,))
    stops: list[str]
    think_open: bool = False  # inside a <think> block (for the budget)
    think_count: int = 0  # tokens since that block opened
    end_ids: Any = None  # the token ids that end this row (a set); None: the model's end-of-turn tokens


class RunningBatch:
    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded
        self.live: list[LiveRow] = []
        self.cache: Any = None
        self.mask: Any = None  # (rows, cached columns) 1 where a row has a real token
        self.positions: Any = None  # (rows,) next position of each row
        self.pending: Any = None  # (rows,) the sampled token not yet in the cache

    def __len__(self) -> int:
        return len(self.live)

    # Joining ------------------------------------------------------------------------------------------------------
    def admit(self, rows: list[LiveRow], prompts: list[list[int]]) -> list[LiveRow]:
        """Prefill `rows` (`prompts[i]` is row i's prompt ids) and add them to the batch; the rows already ended."""
        import torch
        from transformers import DynamicCache

        loaded = self.loaded
        # rows with the same prompt (an RL group, a request's `n` choices) share one prefill: the distinct prompts
        # are run, then each row takes its prompt's cache and logits
        distinct: dict[tuple[int, ...], int] = {}
        which = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
        width = max(len(p) for p in prompts)
        pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else loaded.eos_ids[0]
        ids = torch.full((len(distinct), width), pad, dtype=torch.long)
        mask = torch.zeros((len(distinct), width), dtype=torch.long)
        for i, prompt in enumerate(distinct):
            ids[i, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            mask[i, width - len(prompt):] = 1
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        for live, prompt in zip(rows, prompts):
            self._start_think_count(live, prompt)
        lean = lean_decoder(loaded.model)
        cache = lean.new_cache() if lean is not None else DynamicCache()
        device = loaded.device
        logits = self._forward(ids.to(device), mask.to(device), positions.to(device), cache)
        mask = mask.to(device)
        if len(distinct) < len(prompts):
            index = torch.tensor(which, device=device)
            logits, mask = logits.index_select(0, index), mask.index_select(0, index)
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys.index_select(0, index), layer.values.index_select(0, index)
        tokens = self._sample(rows, logits)
        self._merge(rows, cache, mask, mask.sum(1), tokens)
        return self._retire()

    def _merge(self, rows: list[LiveRow], cache: Any, mask: Any, positions: Any, tokens: Any) -> None:
        import torch

        if not self.live:
            self.live, self.cache, self.mask, self.positions, self.pending = list(rows), cache, mask, positions, tokens
            return
        width = max(self.mask.shape[1], mask.shape[1])
        for old, new in zip(self.cache.layers, cache.layers):
            old.keys = torch.cat([_left_pad(old.keys, width, 2), _left_pad(new.keys, width, 2)])
            old.values = torch.cat([_left_pad(old.values, width, 2), _left_pad(new.values, width, 2)])
        self.mask = torch.cat([_left_pad(self.mask, width, 1), _left_pad(mask, width, 1)])
        self.positions = torch.cat([self.positions, positions])
        self.pending = torch.cat([self.pending, tokens])
        self.live.extend(rows)

    # Decoding -----------------------------------------------------------------------------------------------------
    def step(self) -> list[LiveRow]:
        """One token for every live row; the rows that ended (already out of the batch)."""
        import torch

        ones = torch.ones((len(self.live), 1), dtype=self.mask.dtype, device=self.mask.device)
        self.mask = torch.cat([self.mask, ones], dim=1)
        logits = self._forward(self.pending.unsqueeze(1), self.mask, self.positions.unsqueeze(1), self.cache)
        self.positions = self.positions + 1
        self.pending = self._sample(self.live, logits)
        return self._retire()

    def _forward(self, ids: Any, mask: Any, positions: Any, cache: Any) -> Any:
        """Logits at each row's last position; `cache` grows by the new columns."""
        import torch

        model = self.loaded.model
        lean = lean_decoder(model)
        with torch.inference_mode():
            if lean is not None and isinstance(cache, KVCache):
                return lean.last_logits(ids, mask, positions, cache)
            out = model(input_ids=ids, attention_mask=mask, position_ids=positions, **cache_argument(cache),
                        use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :]

    def _sample(self, rows: list[LiveRow], scores: Any) -> Any:
        import torch

        device = scores.device
        close = self.loaded.think_close
        forced = [i for i, live in enumerate(rows) if live.row.budget is not None and close is not None
                  and live.think_open and live.think_count >= live.row.budget]
        if forced:  # over its thinking budget: only `</think>` is left open
            scores = scores.clone()
            scores[forced, :] = float("-inf")
            scores[forced, close] = 0.0
        # one tensor from Python floats (exact for float64), not one indexing op per row
        uniforms = torch.tensor([float(live.uniforms[len(live.row.tokens)]) for live in rows], dtype=torch.float64,
                                device=device)
        picked, logp = draw(scores, temperature=[live.row.temperature for live in rows],
                            top_k=[live.row.top_k for live in rows], top_p=[live.row.top_p for live in rows],
                            uniforms=uniforms)
        version = self.loaded.policy_version  # weights swap between steps (policy_server.publish), never within
        for i, (live, token, lp) in enumerate(zip(rows, picked.tolist(), logp.tolist())):
            live.row.tokens.append(token)
            live.row.logprobs.append(lp)
            live.row.versions.append(version)
            live.row.forced.append(i in forced)
            self._count_think(live, token)
        return picked

    # Leaving ------------------------------------------------------------------------------------------------------
    def _retire(self) -> list[LiveRow]:
        ended = [i for i, live in enumerate(self.live) if self._ended(live)]
        if not ended:
            return []
        gone = [self.live[i] for i in ended]
        keep = [i for i in range(len(self.live)) if i not in set(ended)]
        self.live = [self.live[i] for i in keep]
        if not keep:
            self.cache = self.mask = self.positions = self.pending = None
            return gone
        import torch

        index = torch.tensor(keep, device=self.mask.device)
        mask = self.mask.index_select(0, index)
        used = mask.any(dim=0).nonzero()
        first = int(used[0]) if used.numel() else 0  # columns before it hold only padding now
        self.mask = mask[:, first:]
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, index)[:, :, first:]
            layer.values = layer.values.index_select(0, index)[:, :, first:]
        self.positions = self.positions.index_select(0, index)
        self.pending = self.pending.index_select(0, index)
        return gone

    def _ended(self, live: LiveRow) -> bool:
        row, loaded = live.row, self.loaded
        ends = loaded.eos_ids if live.end_ids is None else live.end_ids
        if row.tokens[-1] in ends or len(row.tokens) >= row.max_tokens:
            return True
        if live.stops:  # stop strings end the row early; the reply is cut at the stop afterwards
            text = loaded.tokenizer.decode(row.tokens, skip_special_tokens=True)
            return any(stop in text for stop in live.stops)
        return False

    def fail_all(self) -> list[LiveRow]:
        """Drop every row (after an error in a forward); the rows that were live."""
        gone, self.live = self.live, []
        self.cache = self.mask = self.positions = self.pending = None
        return gone

    # Thinking budget ----------------------------------------------------------------------------------------------
    def _start_think_count(self, live: LiveRow, prompt: list[int]) -> None:
        open_id, close_id = self.loaded.think_open, self.loaded.think_close
        if live.row.budget is None or open_id is None or close_id is None or open_id not in prompt:
            return
        last_open = len(prompt) - 1 - prompt[::-1].index(open_id)
        if close_id not in prompt[last_open:]:
            live.think_open, live.think_count = True, len(prompt) - last_open - 1

    def _count_think(self, live: LiveRow, token: int) -> None:
        if live.row.budget is None:
            return
        if token == self.loaded.think_open:
            live.think_open, live.think_count = True, 0
        elif token == self.loaded.think_close:
            live.think_open = False
        elif live.think_open:
            live.think_count += 1


def _left_pad(tensor: Any, width: int, dim: int) -> Any:
    """`tensor` with zeros added before its `dim` axis up to `width` (padding columns are masked out)."""
    import torch

    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([torch.zeros(shape, dtype=tensor.dtype, device=tensor.device), tensor], dim=dim)
