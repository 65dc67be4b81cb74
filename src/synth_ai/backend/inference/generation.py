"""Prompt encoding, per-row sampling (`draw`), and one `generate` call for a request that runs alone (images, vision
models; text requests decode in the running batch of `decoding`).

Every request becomes `n` rows. Sampling is done per row by `RowSampler` (the last logits processor; `generate`
itself runs greedy over the one token the sampler leaves open), so rows of one batch may differ in temperature,
top_p, top_k, thinking budget and seed: each row draws from its own `torch.Generator`, seeded from the request's
`seed` (a fresh random seed when absent), by inverse-CDF lookups over the vocabulary. The sampler records each sampled token's log-prob under the
temperature-scaled distribution before top-k / top-p (what RL training computes), marks the tokens the thinking
budget forced, and ends a row (forces end-of-turn) once it reaches its own `max_tokens`; the
rest of the batch goes on. Stop strings are applied per row after generation: the row is cut at the first token
whose text completes a stop string, so the recorded token ids and log-probs are exactly the returned text's.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from synth_ai.errors import InvalidInputError


@dataclass
class Encoded:
    """One request, rendered and tokenised (a batch of one on the model's device)."""

    prefix: str  # text the prompt opened for the model ("<think>\n"), part of the reply's text
    inputs: dict[str, Any]
    prompt_ids: list[int]
    tools: bool


@dataclass
class Row:
    """One choice to sample: which request it belongs to and its own limits and sampling settings."""

    request: int
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    budget: int | None
    seed: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    forced: list[bool] = field(default_factory=list)  # per token: forced (thinking budget), not sampled
    versions: list[int] = field(default_factory=list)  # per token: the weights' policy_version that sampled it


def encode(loaded: Any, params: dict[str, Any], messages: list[dict[str, Any]], images: list[Any]) -> Encoded:
    import torch

    tokenizer = loaded.tokenizer
    tools = params["tools"] if params["tool_choice"] != "none" else None
    thinking = params["thinking_mode"]
    template_kwargs: dict[str, Any] = {}
    if thinking is not None:
        template_kwargs["enable_thinking"] = thinking == "think"
    try:
        prompt = tokenizer.apply_chat_template(messages, tools=tools, chat_template=loaded.template,
                                               add_generation_prompt=True, tokenize=False, **template_kwargs)
    except Exception as exc:  # a template error is a request problem (e.g. an unexpected message shape)
        raise InvalidInputError(f"The messages could not be rendered with {loaded.model_id}'s chat template "
                                f"({type(exc).__name__}: {exc}).") from exc
    # "think": open the block ourselves (what Qwen3 thinking models start with), so thinking_budget can count
    # from it. "no_think" is the template's business (`enable_thinking=False` writes the empty block in Qwen3
    # templates; Qwen3-VL Instruct templates have no thinking to turn off).
    prefix = "<think>\n" if thinking == "think" and not prompt.endswith("<think>\n") else ""
    prompt += prefix
    if images:
        inputs = loaded.processor(text=[prompt], images=images, return_tensors="pt")
    else:
        inputs = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")
    inputs = {k: v.to(loaded.device) for k, v in inputs.items() if hasattr(v, "to")}
    if loaded.vision and images and "mm_token_type_ids" not in inputs and loaded.image_pad is not None:
        inputs["mm_token_type_ids"] = (inputs["input_ids"] == loaded.image_pad).to(torch.int32)
    prompt_len = int(inputs["input_ids"].shape[1])
    context = context_length(loaded.model)
    if context is not None and prompt_len >= context:
        raise InvalidInputError(
            f"The prompt is {prompt_len} tokens; {loaded.model_id} has a context of {context} tokens.",
            hint="Shorten the messages (or drop old turns) so the prompt and the reply fit in the context.",
            details={"code": "context_length_exceeded", "prompt_tokens": prompt_len, "context_length": context})
    return Encoded(prefix=prefix, inputs=inputs, prompt_ids=inputs["input_ids"][0].tolist(), tools=bool(tools))


def rows_for(index: int, params: dict[str, Any]) -> list[Row]:
    seed = params["seed"]
    budget = params["thinking_budget"] if params["thinking_mode"] != "no_think" else None
    rows = []
    for choice in range(params["n"]):
        row_seed = secrets.randbits(63) if seed is None else (seed if choice == 0 else _choice_seed(seed, choice))
        rows.append(Row(request=index, max_tokens=params["max_tokens"], temperature=params["temperature"],
                        top_p=params["top_p"], top_k=params["top_k"] or 0, budget=budget, seed=row_seed))
    return rows


def generate(loaded: Any, encoded: list[Encoded], rows: list[Row]) -> None:
    """Sample every row in one `generate` call; fills `row.tokens` (end-of-turn included when sampled, cut at
    the row's max_tokens) and `row.logprobs`."""
    import torch
    from transformers import LogitsProcessorList

    pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else loaded.eos_ids[0]
    if len(encoded) == 1:  # one request (maybe with images): its inputs as they are, repeated per choice
        inputs = {k: v for k, v in encoded[0].inputs.items()}
        if len(rows) > 1:
            inputs = {k: (v.repeat(len(rows), *([1] * (v.dim() - 1))) if k in ("input_ids", "attention_mask",
                                                                                 "mm_token_type_ids") else v)
                      for k, v in inputs.items()}
            if "pixel_values" in inputs:
                inputs["pixel_values"] = inputs["pixel_values"].repeat(len(rows), 1)
                inputs["image_grid_thw"] = inputs["image_grid_thw"].repeat(len(rows), 1)
    else:
        inputs = _left_padded([encoded[row.request].prompt_ids for row in rows], pad, loaded.device)
    width = int(inputs["input_ids"].shape[1])
    processors: list[Any] = []
    budget = None
    if loaded.think_open is not None and loaded.think_close is not None and \
            any(row.budget is not None for row in rows):
        budget = ThinkingBudget(loaded.think_open, loaded.think_close, [row.budget for row in rows])
        processors.append(budget)
    sampler = RowSampler(rows, width, loaded.eos_ids[0], loaded.device)
    processors.append(sampler)
    gen = {"max_new_tokens": max(row.max_tokens for row in rows), "eos_token_id": loaded.eos_ids,
           "pad_token_id": pad, "do_sample": False, "temperature": None, "top_p": None, "top_k": None,
           "use_cache": True, "logits_processor": LogitsProcessorList(processors)}
    with torch.inference_mode():
        sequences = loaded.model.generate(**inputs, **gen)
    generated = sequences[:, width:].tolist()
    logprobs = sampler.logprobs() or [[] for _ in rows]
    for index, row in enumerate(rows):
        tokens = generated[index][:row.max_tokens]
        cut = next((i + 1 for i, t in enumerate(tokens) if t in loaded.eos_ids), len(tokens))
        row.tokens, row.logprobs = tokens[:cut], logprobs[index][:cut]
        row.forced = [index in step for step in budget.forced][:cut] if budget else [False] * len(row.tokens)
        row.versions = [loaded.policy_version] * len(row.tokens)  # one generate call: one set of weights


def cut_at_stop(tokenizer: Any, tokens: list[int], stops: list[str]) -> tuple[list[int], bool]:
    """`tokens` up to the first one whose text completes a stop string (what `generate`'s stop strings do)."""
    if not stops or not any(s in tokenizer.decode(tokens, skip_special_tokens=True) for s in stops):
        return tokens, False
    for end in range(1, len(tokens) + 1):
        text = tokenizer.decode(tokens[:end], skip_special_tokens=True)
        if any(s in text for s in stops):
            return tokens[:end], True
    return tokens, False  # pragma: no cover - the whole row holds a stop


def _left_padded(prompts: list[list[int]], pad: int, device: str) -> dict[str, Any]:
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        ids[i, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[i, width - len(prompt):] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def _choice_seed(seed: int, choice: int) -> int:
    import hashlib

    digest = hashlib.sha256(f"{seed}:choice:{choice}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFFFFFFFFFFFFFF


class RowSampler:
    """The last logits processor: per row, apply its temperature / top-k / top-p, draw (argmax when temperature is
    0), record the drawn token's log-prob, and leave only that token open. All rows are handled in one set of
    tensor operations: each row's draws are inverse-CDF lookups of uniforms taken up front from its own
    generator, so a row samples the same tokens whatever batch it is in."""

    def __init__(self, rows: list[Row], width: int, eos: int, device: str) -> None:
        import torch

        self.width, self.eos = width, eos
        steps = max(row.max_tokens for row in rows)
        self.uniforms = torch.stack([torch.rand(steps, generator=torch.Generator().manual_seed(row.seed),
                                                dtype=torch.float64) for row in rows]).to(device)
        self.greedy = torch.tensor([row.temperature == 0 for row in rows], device=device)
        self.temperature = [row.temperature for row in rows]
        self.top_k = [row.top_k for row in rows]
        self.top_p = [row.top_p for row in rows]
        self.limit = torch.tensor([row.max_tokens for row in rows], device=device)
        self.steps: list[Any] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        step = input_ids.shape[1] - self.width
        picked, logp = draw(scores, self.temperature, self.top_k, self.top_p, self.uniforms[:, step],
                            greedy=self.greedy)
        ended = step >= self.limit  # past its own limit: end the row (this token is cut off afterwards)
        picked = torch.where(ended, torch.full_like(picked, self.eos), picked)
        self.steps.append(torch.where(ended, torch.zeros_like(logp), logp))
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(1, picked.unsqueeze(1), 0.0)
        return out

    def logprobs(self) -> list[list[float]]:
        import torch

        if not self.steps:
            return []
        return torch.stack(self.steps, dim=1).cpu().tolist()


def draw(scores: Any, temperature: list[float], top_k: list[int], top_p: list[float], uniforms: Any, *,
         greedy: Any = None) -> tuple[Any, Any]:
    """Per row: apply its temperature / top-k / top-p, draw by an inverse-CDF lookup of its uniform (argmax when
    its temperature is 0); the drawn tokens and their log-probs under the temperature-scaled distribution before
    top-k / top-p, the quantity RL training computes for them (docs/decisions.md, "Sampling log-probs for GSPO")."""
    import torch

    device = scores.device
    if greedy is None:
        greedy = torch.tensor([t == 0 for t in temperature], device=device)
    temp = torch.tensor([t or 1.0 for t in temperature], device=device).unsqueeze(1)
    top_k = [0 if t == 0 else k for t, k in zip(temperature, top_k)]
    top_p = [1.0 if t == 0 else p for t, p in zip(temperature, top_p)]
    scores = scores.float()
    scaled = scores if all(t in (0, 1) for t in temperature) else scores / temp  # x / 1 is x: skip the op
    full = torch.log_softmax(scaled, dim=-1)
    warped = _warp(scaled, top_k, top_p)
    dist = full if warped is scaled else torch.log_softmax(warped, dim=-1)  # no top-k / top-p: the same values
    cdf = dist.double().exp().cumsum(dim=-1)
    target = (uniforms * cdf[:, -1]).unsqueeze(1)
    drawn = torch.searchsorted(cdf, target, right=True).squeeze(1).clamp(max=scores.shape[1] - 1)
    picked = torch.where(greedy, scores.argmax(dim=-1), drawn) if bool(greedy.any()) else drawn
    return picked, full.gather(1, picked.unsqueeze(1)).squeeze(1)


def _warp(logits: Any, top_k: list[int], top_p: list[float]) -> Any:
    """Per-row top-k then top-p (nucleus) filtering, in the order and with the tie rules `transformers` uses."""
    import torch

    vocab = logits.shape[-1]
    if any(0 < k < vocab for k in top_k):
        k = torch.tensor([k if 0 < k < vocab else vocab for k in top_k], device=logits.device)
        kth = torch.sort(logits, dim=-1, descending=True).values.gather(1, (k - 1).unsqueeze(1))
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if any(p < 1.0 for p in top_p):
        p = torch.tensor(top_p, device=logits.device, dtype=logits.dtype).unsqueeze(1)
        ordered, order = torch.sort(logits, dim=-1, descending=False)
        drop = ordered.softmax(dim=-1).cumsum(dim=-1) <= (1 - p)
        drop[:, -1] = False  # keep at least the most likely token
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return logits


class ThinkingBudget:
    """Force `</think>` once a row has spent its budget of tokens inside an open think block."""

    def __init__(self, open_id: int, close_id: int, budgets: list[int | None]) -> None:
        self.open_id, self.close_id, self.budgets = open_id, close_id, budgets
        self.forced: list[set[int]] = []  # per step, the rows it forced (their token is not trained)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        self.forced.append(set())
        for row, budget in enumerate(self.budgets):
            if budget is None:
                continue
            seq = input_ids[row]
            opens = (seq == self.open_id).nonzero()
            if opens.numel() == 0:
                continue
            last_open = int(opens[-1])
            if (seq[last_open:] == self.close_id).nonzero().numel():
                continue
            if seq.shape[0] - last_open - 1 >= budget:
                scores[row, :] = float("-inf")
                scores[row, self.close_id] = 0.0
                self.forced[-1].add(row)
        return scores


def context_length(model: Any) -> int | None:
    """The model's context in tokens (`max_position_embeddings`, in the text config for Qwen3-VL), if it says."""
    config = getattr(model, "config", None)
    for source in (config, getattr(config, "text_config", None)):
        value = getattr(source, "max_position_embeddings", None)
        if isinstance(value, int) and value > 0:
            return value
    return None
