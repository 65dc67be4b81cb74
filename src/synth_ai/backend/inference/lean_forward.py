"""A lean forward pass for the running batch (`decoding`): Qwen3 text decoders, SDPA attention.

Why: on small models a decoding step is mostly per-call overhead in `transformers` (output capture, kwarg
deprecation wrappers, config look-ups, the 4D mask rebuilt from the 2D one, the cache object), about 2 ms of CPU
per forward whatever the batch. This pass calls the model's own modules (projections, norms, MLP, rotary
embedding: LoRA layers and weight updates are seen as they are) and `transformers`' own SDPA attention function,
in the order `Qwen3Model.forward` does, so it computes the same numbers; what it leaves out is the plumbing. It
builds the same boolean mask `transformers` would (none where no row is padded) and returns the logits of each
row's last position only (what the sampler reads). Plain linear layers, the SiLU and (in float32) Qwen3's RMS norms are
called as their kernels, looked up once per model, without `nn.Module.__call__`: the same operations, so the same
bits, at less CPU per step (a LoRA layer or a hooked module is still called as a module).

`lean_decoder(model)` gives one per model (None when the model is not a plain Qwen3 text decoder with SDPA
attention: the caller keeps the `transformers` forward). The KV cache is a `KVCache`: per layer, `keys` / `values`
tensors (rows, kv heads, columns, head dim), holding what `DynamicCache` would hold; outside autograd they are
views of buffers with room to grow (`KVLayer.extend`).
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

_DECODERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_NONE = object()


ROOM_STEP = 256  # a cache buffer grows by at most this many columns at a time (see `KVLayer.extend`)


@dataclass
class KVLayer:
    keys: Any = None
    values: Any = None
    room: Any = None  # (key buffer, value buffer, the `keys` they back): see `extend`

    def extend(self, k: Any, v: Any) -> tuple[Any, Any]:
        """The cached keys and values with the new columns `k` / `v` appended (also stored in the layer).

        Why buffers: `torch.cat` allocates and copies the whole cache at every decoding step, for every layer; at
        a mid-size model's batch of 32 rows that was a fifth of the decoding time (bench/README.md). Outside
        autograd the columns are written into buffers with spare columns after them (doubling, by at most
        ROOM_STEP), and `keys` / `values` are views of their leading columns: same values, one column copied per
        step. A cache someone replaced (the running batch merges and retires rows by building new tensors) moves
        into new buffers at its next extension; under autograd it is concatenated as before."""
        import torch

        if torch.is_grad_enabled():
            if self.keys is not None:
                k, v = torch.cat([self.keys, k], dim=-2), torch.cat([self.values, v], dim=-2)
            self.keys, self.values = k, v
            return k, v
        used = 0 if self.keys is None else int(self.keys.shape[2])
        total = used + int(k.shape[2])
        room = self.room
        if room is None or room[2] is not self.keys or room[0].shape[2] < total:
            rows, heads, _, dim = k.shape
            capacity = total + min(max(total, 16), ROOM_STEP)
            room = (k.new_empty((rows, heads, capacity, dim)), v.new_empty((rows, heads, capacity, dim)))
            if used:
                room[0][:, :, :used] = self.keys
                room[1][:, :, :used] = self.values
        room[0][:, :, used:total] = k
        room[1][:, :, used:total] = v
        self.keys, self.values = room[0][:, :, :total], room[1][:, :, :total]
        self.room = (room[0], room[1], self.keys)
        return self.keys, self.values


@dataclass
class KVCache:
    layers: list[KVLayer] = field(default_factory=list)


def lean_decoder(model: Any) -> LeanDecoder | None:
    found = _DECODERS.get(model)
    if found is None:
        found = LeanDecoder.build(model) or _NONE
        _DECODERS[model] = found
    return None if found is _NONE else found


class LeanDecoder:
    def __init__(self, inner: Any, lm_head: Any, attention: Any, rotary: Any) -> None:
        self.inner, self.attention, self.apply_rotary = inner, attention, rotary
        self.layers = [_LayerCalls.of(layer) for layer in inner.layers]
        self.final_norm, self.lm_head = _norm_call(inner.norm), _linear_call(lm_head)

    @classmethod
    def build(cls, model: Any) -> LeanDecoder | None:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        from synth_ai.backend.ml.loading import core_parts

        try:
            inner, lm_head = core_parts(model)
        except AttributeError:
            return None
        config = getattr(inner, "config", None)
        if getattr(config, "model_type", None) != "qwen3" or getattr(config, "_attn_implementation", None) != "sdpa":
            return None
        if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or []):
            return None
        layers = list(getattr(inner, "layers", []))
        if not layers or len(layers) != config.num_hidden_layers:
            return None
        rotary = getattr(sys.modules.get(type(layers[0].self_attn).__module__), "apply_rotary_pos_emb", None)
        attention = ALL_ATTENTION_FUNCTIONS.get("sdpa")
        if rotary is None or attention is None or not hasattr(layers[0].self_attn, "q_norm"):
            return None
        return cls(inner, lm_head, attention, rotary)

    def new_cache(self) -> KVCache:
        return KVCache([KVLayer() for _ in self.layers])

    def last_logits(self, ids: Any, mask: Any, positions: Any, cache: KVCache) -> Any:
        """Logits (rows, vocab) at each row's last position. `ids` / `positions` (rows, new tokens); `mask` (rows,
        cached + new columns), 1 where a row has a real token; `cache` holds the cached columns and is extended."""

        rows, new = ids.shape
        past = 0 if cache.layers[0].keys is None else int(cache.layers[0].keys.shape[2])
        attn_mask = _sdpa_mask(mask, new, past)
        hidden = self.inner.embed_tokens(ids)
        cos, sin = self.inner.rotary_emb(hidden, positions)
        for layer, kv in zip(self.layers, cache.layers):
            attn = layer.attn
            shape = (rows, new, -1, attn.head_dim)
            residual = hidden
            x = layer.input_norm(hidden)
            q = layer.q_norm(layer.q_proj(x).view(shape)).transpose(1, 2)
            k = layer.k_norm(layer.k_proj(x).view(shape)).transpose(1, 2)
            v = layer.v_proj(x).view(shape).transpose(1, 2)
            q, k = self.apply_rotary(q, k, cos, sin)
            k, v = kv.extend(k, v)
            out, _ = self.attention(attn, q, k, v, attn_mask, dropout=0.0, scaling=attn.scaling, sliding_window=None)
            hidden = residual + layer.o_proj(out.reshape(rows, new, -1).contiguous())
            x = layer.post_norm(hidden)
            hidden = hidden + layer.down_proj(layer.act(layer.gate_proj(x)) * layer.up_proj(x))
        return self.lm_head(self.final_norm(hidden)[:, -1:, :])[:, -1, :]


@dataclass
class _LayerCalls:
    """One decoder layer's parts as callables, looked up once (see `_linear_call`, `_norm_call`)."""

    attn: Any
    input_norm: Any
    q_proj: Any
    k_proj: Any
    v_proj: Any
    o_proj: Any
    q_norm: Any
    k_norm: Any
    post_norm: Any
    gate_proj: Any
    up_proj: Any
    down_proj: Any
    act: Any

    @classmethod
    def of(cls, layer: Any) -> _LayerCalls:
        import torch

        attn, mlp = layer.self_attn, layer.mlp
        act = mlp.act_fn
        if type(act).__name__ in ("SiLUActivation", "SiLU") and not _hooked(act):
            act = torch._C._nn.silu
        return cls(attn, _norm_call(layer.input_layernorm), _linear_call(attn.q_proj), _linear_call(attn.k_proj),
                   _linear_call(attn.v_proj), _linear_call(attn.o_proj), _norm_call(attn.q_norm),
                   _norm_call(attn.k_norm), _norm_call(layer.post_attention_layernorm), _linear_call(mlp.gate_proj),
                   _linear_call(mlp.up_proj), _linear_call(mlp.down_proj), act)


def _hooked(module: Any) -> bool:
    """Whether calling `module` does more than its class's forward: hooks, or a forward replaced on the instance
    (accelerate's offloading hooks do that)."""
    from torch.nn.modules import module as torch_module

    return bool(module._forward_hooks or module._forward_pre_hooks or "forward" in module.__dict__
                or torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks)


def _linear_call(module: Any) -> Any:
    """A plain `nn.Linear` as its kernel call (the module's own weight and bias, read where they live, so updates
    are seen); anything else (a LoRA layer, a hooked module) as the module."""
    import torch

    if type(module) is not torch.nn.Linear or _hooked(module):
        return module
    weight, bias, linear = module.weight, module.bias, torch._C._nn.linear
    return lambda x: linear(x, weight, bias)


def _norm_call(module: Any) -> Any:
    """Qwen3's RMS norm in float32 as one `rms_norm` call (its forward's operations, in the same order: the same
    bits), else the module."""
    import torch

    if type(module).__name__ != "Qwen3RMSNorm" or module.weight.dtype != torch.float32 or _hooked(module):
        return module
    weight, eps, shape, rms_norm = module.weight, module.variance_epsilon, tuple(module.weight.shape), torch.rms_norm
    return lambda x: rms_norm(x, shape, weight, eps) if x.dtype == torch.float32 else module(x)


def _sdpa_mask(mask: Any, new: int, past: int) -> Any:
    """The boolean (rows, 1, new, columns) mask `transformers` builds for SDPA (causal, padding masked), or None
    where it builds none (no padding, and one new token or an empty cache)."""
    import torch

    padding = mask.bool()
    if (new == 1 or past == 0) and bool(padding.all()):
        return None
    columns = padding.shape[1]
    query = torch.arange(new, device=mask.device) + past
    causal = torch.arange(columns, device=mask.device)[None, :] <= query[:, None]  # (new, columns)
    return (causal[None, :, :] & padding[:, None, :])[:, None, :, :]
