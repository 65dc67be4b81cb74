"""The log-probability (and the entropy) of chosen tokens through the LM head, without a [tokens, vocabulary]
logits tensor: the one place RL (policy, old-log-prob recompute, reference) and SFT (its loss) score tokens.

Why: with Qwen3's 151,936-token vocabulary, `log_softmax(lm_head(hidden).float() / T)` creates fp32
[tokens, vocabulary] tensors of ~0.6 MiB per token (~9.3 GiB per 16k tokens): the logits, their fp32 copy, the
log-softmax (kept for backward) and, in backward, its gradient.
`chunked_scores` walks the vocabulary in blocks of `VOCAB_CHUNK` rows of the LM-head weight and the tokens in
blocks of `TOKEN_CHUNK`, keeping per token a running maximum, a running sum of exp(score - max) and a running sum
of exp(score - max) * score (an online logsumexp, as flash attention keeps its softmax), so at most one
[TOKEN_CHUNK, VOCAB_CHUNK] block of scores exists at a time. For backward it keeps the inputs (hidden states,
weight, bias, targets, temperatures) and three numbers per token (the maximum score, the log of the sum, the
entropy); backward recomputes each block's scores and accumulates the gradients of the hidden states, the weight
and the bias.

With scores s = (h W^T + b) / T, p = softmax(s), log Z = logsumexp(s):
- log-prob of the target y: s_y - log Z; its gradient in s is onehot(y) - p;
- entropy H = log Z - sum(p * s); its gradient in s is p * (E_p[s] - s), with E_p[s] = log Z - H.
The entropy carries its gradient (an entropy bonus may train through it); a caller that only logs it pays nothing
in backward (an unused output's gradient is skipped). The chain through T gives 1/T; temperatures are data (no
gradient). A frozen weight (LoRA) skips the weight-gradient matmul, and a tied weight (the embeddings) simply
receives its gradient here as any other use of it does.

Precision: each block's matmul runs in the dtype `lm_head(hidden)` would (the autocast dtype when autocast is on,
else the inputs' common dtype), and everything after it (scores, running sums, accumulated gradients) is fp32, as
the materialised path's `.float()` logits are.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import torch

# One block of scores is TOKEN_CHUNK x VOCAB_CHUNK fp32 = 32 MiB (backward holds about four such temporaries): small
# next to a model, yet each block's matmul is large enough (1024 x hidden x 8192) to keep a GPU busy. 8192 is also
# prime-rl's LM-head chunk. Qwen3's 151,936 tokens make 19 vocabulary blocks, the last one partial.
TOKEN_CHUNK = 1024
VOCAB_CHUNK = 8192


class TokenScores(NamedTuple):
    logprobs: Any  # [tokens] fp32: log p(target) at the given temperature
    entropy: Any  # [tokens] fp32: the entropy of that distribution, or None where it was not asked for


def lm_head_scores(lm_head: Any, hidden: Any, targets: Any, temperature: Any = None, *, chunked: bool = True,
                   entropy: bool = False) -> TokenScores:
    """Score `targets` [N] from `hidden` [N, H] through `lm_head`, at `temperature` [N] (None: 1).

    `chunked` uses `chunked_scores` where the LM head is a plain `nn.Linear` (bias or not; tied or not; frozen or
    not). A head wrapped by PEFT (LoRA on the LM head, `modules_to_save`), a subclass with a forward of its own
    (a quantised layer) or a head with forward hooks has a forward the chunked maths would bypass, so it takes the
    materialised path, as does `chunked=False`. The
    chunked path always gives the entropy (it costs one multiply-add per block); the materialised one only when
    `entropy` (it would add a [N, V] tensor)."""
    plain = _plain_linear(lm_head) if chunked else False
    if not plain:
        return materialised_scores(lm_head(hidden), targets, temperature, entropy=entropy)
    return chunked_scores(hidden, lm_head.weight, targets, temperature, bias=lm_head.bias)


def materialised_scores(logits: Any, targets: Any, temperature: Any = None, *, entropy: bool = False) -> TokenScores:
    """The reference path (the one the trainers used before `chunked_scores`): fp32 logits, a full log-softmax."""
    logits = logits.float()
    if temperature is not None:
        logits = logits / temperature.unsqueeze(1)
    logp = torch.log_softmax(logits, dim=-1)
    values = logp.gather(-1, targets.unsqueeze(1)).squeeze(1)
    return TokenScores(values, -(logp.exp() * logp).sum(-1) if entropy else None)


def chunked_scores(hidden: Any, weight: Any, targets: Any, temperature: Any = None, *, bias: Any = None,
                   token_chunk: int | None = None, vocab_chunk: int | None = None) -> TokenScores:
    """`materialised_scores(hidden @ weight.T + bias, ...)` in blocks (of `TOKEN_CHUNK` x `VOCAB_CHUNK` unless
    given); differentiable in hidden, weight and bias."""
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"chunked_scores takes hidden [tokens, hidden] and weight [vocab, hidden]; found "
                         f"{tuple(hidden.shape)} and {tuple(weight.shape)}")
    if targets.shape != hidden.shape[:1] or (temperature is not None and temperature.shape != targets.shape):
        raise ValueError(f"targets and temperature must be [tokens] = [{hidden.shape[0]}]; found "
                         f"{tuple(targets.shape)} and {None if temperature is None else tuple(temperature.shape)}")
    device = hidden.device.type
    if torch.is_autocast_enabled(device):  # what `lm_head(hidden)` would multiply in
        dtype = torch.get_autocast_dtype(device)
    else:
        dtype = torch.promote_types(hidden.dtype, weight.dtype)
    temperature = None if temperature is None else temperature.float()
    logp, ent = _ChunkedHeadScores.apply(hidden, weight, bias, targets, temperature, dtype,
                                         token_chunk or TOKEN_CHUNK, vocab_chunk or VOCAB_CHUNK)
    return TokenScores(logp, ent)


def _plain_linear(lm_head: Any) -> bool:
    """An `nn.Linear` whose call is exactly `hidden @ weight.T + bias`: not a subclass with its own forward
    (bitsandbytes' quantised layers), not a PEFT layer, no hooks (accelerate's `_hf_hook` wraps forward too)."""
    return (isinstance(lm_head, torch.nn.Linear) and type(lm_head).forward is torch.nn.Linear.forward
            and not hasattr(lm_head, "base_layer") and not lm_head._forward_hooks
            and not lm_head._forward_pre_hooks and not hasattr(lm_head, "_hf_hook"))


class _Blocks:
    """The shapes and dtype both passes walk: vocabulary blocks of the weight (cast once per block), token rows."""

    def __init__(self, hidden: Any, weight: Any, bias: Any, temperature: Any, dtype: Any, token_chunk: int,
                 vocab_chunk: int) -> None:
        self.hidden = hidden.to(dtype)  # cast once: [N, H] is small
        self.weight, self.bias, self.temperature, self.dtype = weight, bias, temperature, dtype
        self.token_chunk, self.vocab_chunk = token_chunk, vocab_chunk

    def vocabulary(self) -> Iterator[tuple[int, Any, Any]]:
        for start in range(0, self.weight.shape[0], self.vocab_chunk):
            end = start + self.vocab_chunk
            bias = None if self.bias is None else self.bias[start:end].to(self.dtype)
            yield start, self.weight[start:end].to(self.dtype), bias

    def tokens(self) -> Iterator[slice]:
        for start in range(0, self.hidden.shape[0], self.token_chunk):
            yield slice(start, start + self.token_chunk)

    def scores(self, rows: slice, weight: Any, bias: Any) -> Any:
        """fp32 [rows, block] scores at the rows' temperatures."""
        logits = self.hidden[rows] @ weight.t()
        if bias is not None:
            logits = logits + bias
        logits = logits.float()
        return logits if self.temperature is None else logits / self.temperature[rows].unsqueeze(1)


def _in_block(targets: Any, start: int, width: int) -> tuple[Any, Any]:
    """(column of each target inside the block, clamped; whether the target falls inside it)."""
    local = targets - start
    inside = (local >= 0) & (local < width)
    return local.clamp(0, width - 1).unsqueeze(1), inside


def _score_gradient(s: Any, top: Any, log_total: Any, mean_score: Any, column: Any, inside: Any, grad_logp: Any,
                    grad_entropy: Any, temperature: Any) -> Any:
    """The gradient in one block's logits: (grad_logp * (onehot(y) - p) + grad_entropy * p * (E_p[s] - s)) / T.
    Works in place on `s` (the block's own fresh scores) to hold as few block-sized tensors as it can."""
    # (s - max) - log(sum): as log_softmax rounds it, finer than s - (max + log(sum)) when scores are large
    shifted = (s - top.unsqueeze(1)) if grad_entropy is not None else s.sub_(top.unsqueeze(1))
    p = shifted.sub_(log_total.unsqueeze(1)).exp_()
    if grad_entropy is not None:  # s is still the scores here
        entropy_part = s.neg_().add_(mean_score.unsqueeze(1)).mul_(p).mul_(grad_entropy.unsqueeze(1))
    if grad_logp is None:
        grad = entropy_part
    else:
        grad = p.mul_(-grad_logp.unsqueeze(1))
        grad.scatter_add_(1, column, torch.where(inside, grad_logp, 0.0).unsqueeze(1))
        if grad_entropy is not None:
            grad += entropy_part
    return grad if temperature is None else grad.div_(temperature.unsqueeze(1))


class _ChunkedHeadScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden: Any, weight: Any, bias: Any, targets: Any, temperature: Any, dtype: Any,
                token_chunk: int, vocab_chunk: int) -> tuple[Any, Any]:
        ctx.set_materialize_grads(False)  # an unused output (the entropy, usually) gets None: its term is skipped
        blocks = _Blocks(hidden, weight, bias, temperature, dtype, token_chunk, vocab_chunk)
        n = hidden.shape[0]
        top = torch.full((n,), float("-inf"), device=hidden.device)
        total = torch.zeros(n, device=hidden.device)  # sum of exp(s - top)
        weighted = torch.zeros(n, device=hidden.device)  # sum of exp(s - top) * s
        picked = torch.zeros(n, device=hidden.device)  # the target's score
        with torch.autocast(hidden.device.type, enabled=False):
            for start, w, b in blocks.vocabulary():
                for rows in blocks.tokens():
                    s = blocks.scores(rows, w, b)
                    column, inside = _in_block(targets[rows], start, s.shape[1])
                    picked[rows] += torch.where(inside, s.gather(1, column).squeeze(1), 0.0)
                    new_top = torch.maximum(top[rows], s.amax(dim=1))
                    rescale = torch.exp(top[rows] - new_top)
                    e = (s - new_top.unsqueeze(1)).exp_()
                    total[rows] = total[rows] * rescale + e.sum(dim=1)
                    weighted[rows] = weighted[rows] * rescale + torch.linalg.vecdot(e, s, dim=1)
                    top[rows] = new_top
        log_total = torch.log(total)
        entropy = (top - weighted / total) + log_total  # log Z - E_p[s], with log Z = top + log_total
        ctx.save_for_backward(hidden, weight, bias, targets, temperature, top, log_total, entropy)
        ctx.sizes = (dtype, token_chunk, vocab_chunk)
        return (picked - top) - log_total, entropy

    @staticmethod
    def backward(ctx: Any, grad_logp: Any, grad_entropy: Any) -> tuple[Any, ...]:
        hidden, weight, bias, targets, temperature, top, log_total, entropy = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        if grad_logp is None and grad_entropy is None:
            return (None,) * 8
        blocks = _Blocks(hidden, weight, bias, temperature, *ctx.sizes)
        grad_hidden = torch.zeros(hidden.shape, device=hidden.device) if need_hidden else None
        grad_weight = torch.zeros_like(weight) if need_weight else None  # skipped when frozen (LoRA)
        grad_bias = torch.zeros_like(bias) if need_bias else None
        mean_score = top + log_total - entropy  # E_p[s]
        with torch.autocast(hidden.device.type, enabled=False):
            for start, w, b in blocks.vocabulary():
                end = start + w.shape[0]
                block_weight = torch.zeros(w.shape, device=w.device) if need_weight else None
                block_bias = torch.zeros(w.shape[0], device=w.device) if need_bias else None
                for rows in blocks.tokens():
                    s = blocks.scores(rows, w, b)
                    column, inside = _in_block(targets[rows], start, s.shape[1])
                    grad_s = _score_gradient(s, top[rows], log_total[rows], mean_score[rows], column, inside,
                                             None if grad_logp is None else grad_logp[rows].float(),
                                             None if grad_entropy is None else grad_entropy[rows].float(),
                                             None if temperature is None else temperature[rows])
                    grad_logits = grad_s.to(blocks.dtype)
                    if need_hidden:
                        grad_hidden[rows] += (grad_logits @ w).float()
                    if need_weight:
                        block_weight += (grad_logits.t() @ blocks.hidden[rows]).float()
                    if need_bias:
                        block_bias += grad_s.sum(dim=0)
                if need_weight:
                    grad_weight[start:end] = block_weight
                if need_bias:
                    grad_bias[start:end] = block_bias
        grad_hidden = grad_hidden.to(hidden.dtype) if need_hidden else None
        return grad_hidden, grad_weight, grad_bias, None, None, None, None, None
