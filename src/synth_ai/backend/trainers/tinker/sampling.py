"""Sampling for a Tinker sampling client, in its training client's worker: the prompt's `num_samples` rows decoded
together with a KV cache, each stopping at its own stop token or string (or `max_tokens`), with the log-prob of
every sampled token, and optionally the prompt's log-probs (`compute_logprobs`).

Stops follow the SDK's `SamplingParams.stop`: absent, the model's end-of-sequence tokens; a list of token ids or of
strings (a sequence stops when its decoded text ends with one); an empty list, no stop but `max_tokens`. The stop
token (or the tokens that complete a stop string) stays in the returned tokens, as the SDK's renderers expect.
Log-probs are those of the distribution sampled from (logits / temperature, then top-k and top-p).
"""

from __future__ import annotations

from typing import Any

import torch

from synth_ai.errors import InvalidInputError

DEFAULT_MAX_TOKENS = 256


def sample(model: Any, tokenizer: Any, eos_ids: list[int], request: dict[str, Any], device: Any) -> dict[str, Any]:
    params = request.get("params") or {}
    prompt = request["tokens"]
    rows = int(request["num_samples"])
    max_tokens = int(params.get("max_tokens") or DEFAULT_MAX_TOKENS)
    temperature = float(params.get("temperature", 1.0))
    top_k, top_p = int(params.get("top_k", -1)), float(params.get("top_p", 1.0))
    stop_ids, stop_texts = _stops(params.get("stop"), eos_ids)
    generator = torch.Generator(device="cpu")
    generator.manual_seed(int(params["seed"]) if params.get("seed") is not None else torch.seed())
    model.eval()
    with torch.no_grad():
        ids = torch.tensor([prompt] * rows, dtype=torch.long, device=device)
        out = model(input_ids=ids, use_cache=True)
        prompt_logprobs = _prompt_logprobs(out.logits[0], prompt) if request.get("prompt_logprobs") else None
        cache, logits = out.past_key_values, out.logits[:, -1, :]
        tokens: list[list[int]] = [[] for _ in range(rows)]
        logprobs: list[list[float]] = [[] for _ in range(rows)]
        done = [False] * rows
        reasons = ["length"] * rows
        for _ in range(max_tokens):
            dist = _distribution(logits.float(), temperature, top_k, top_p)
            picked = torch.multinomial(dist.exp().cpu(), 1, generator=generator).squeeze(1)
            for row in range(rows):
                if done[row]:
                    continue
                token = int(picked[row])
                tokens[row].append(token)
                logprobs[row].append(float(dist[row, token]))
                if token in stop_ids or (stop_texts and _ends_with(tokenizer, tokens[row], stop_texts)):
                    done[row], reasons[row] = True, "stop"
            if all(done):
                break
            out = model(input_ids=picked.view(rows, 1).to(device), past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1, :]
    sequences = [{"tokens": tokens[r], "logprobs": logprobs[r], "stop_reason": reasons[r]} for r in range(rows)]
    return {"sequences": sequences, "prompt_logprobs": prompt_logprobs}


def _stops(stop: Any, eos_ids: list[int]) -> tuple[set[int], list[str]]:
    if stop is None:
        return set(eos_ids), []
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, list):
        raise InvalidInputError(f"sampling_params.stop must be a string or a list (found {type(stop).__name__}).")
    if all(isinstance(s, int) and not isinstance(s, bool) for s in items):
        return set(items), []
    if all(isinstance(s, str) and s for s in items):
        return set(), items
    raise InvalidInputError("sampling_params.stop must list token ids or non-empty strings, not a mix.")


def _ends_with(tokenizer: Any, tokens: list[int], texts: list[str]) -> bool:
    tail = tokenizer.decode(tokens[-16:], skip_special_tokens=False)
    return any(tail.endswith(text) for text in texts)


def _distribution(logits: Any, temperature: float, top_k: int, top_p: float) -> Any:
    """Log-probs of the distribution sampled from; temperature 0 is greedy (all mass on the best token)."""
    if temperature <= 0:
        best = logits.argmax(-1, keepdim=True)
        return torch.full_like(logits, float("-inf")).scatter(-1, best, 0.0)
    scores = logits / temperature
    if 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(scores, descending=True, dim=-1)
        mass = torch.softmax(ordered, -1).cumsum(-1)
        drop = (mass - torch.softmax(ordered, -1)) >= top_p  # keep the smallest prefix whose mass reaches top_p
        scores = scores.scatter(-1, order, ordered.masked_fill(drop, float("-inf")))
    return torch.log_softmax(scores, -1)


def _prompt_logprobs(logits: Any, prompt: list[int]) -> list[float | None]:
    """log p(prompt[i] | prompt[:i]) at temperature 1; None for the first token, which has no context."""
    logp = torch.log_softmax(logits[:-1].float(), -1)
    targets = torch.tensor(prompt[1:], dtype=torch.long, device=logits.device)
    return [None, *logp.gather(-1, targets.unsqueeze(1)).squeeze(1).cpu().tolist()]
