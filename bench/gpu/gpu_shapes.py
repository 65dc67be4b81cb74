"""Model shapes the GPU kit trains, the FLOPs it counts per token, and the bf16 peak of the GPUs it knows.

The Qwen3 shapes are the released models' own (`config.json` of Qwen/Qwen3-0.6B, -1.7B, -4B): the weights are random,
the compute is the real model's. The vocabulary is the real 151,936 rows even though the kit's tokenizer ids stop
at 151,669 (as Qwen's own do): the embedding and the LM head cost what they cost in the real model.

FLOPs per trained token (the convention of PaLM's appendix B and torchtitan, stated here so the MFU column can be
checked):

    full:  6 * N + 12 * L * H * Q * T
    LoRA:  4 * N + 6 * N_lora + 12 * L * H * Q * T

N counts the weights of every matrix multiply a token goes through (q, k, v, o, gate, up, down in each layer, plus
the LM head; the embedding lookup is not a multiply), L layers, H attention heads, Q head dim, T the row's sequence
length. Forward is 2 FLOPs per weight, backward 4 (gradients of activations and of weights); LoRA's frozen weights
get no weight gradient, so they cost 4 per weight, and the adapters cost 6. The attention term is not halved for the
causal mask. MFU = FLOPs per second / the GPU's dense bf16 peak; model FLOPs, not hardware FLOPs: a trainer that
skips work (ours runs the LM head only on labelled tokens, a recompute is not counted) is credited as if it did it.
"""

from __future__ import annotations

from dataclasses import dataclass

REAL_VOCAB = 151_936


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int = REAL_VOCAB
    tied: bool = True

    def matmul_params(self) -> int:
        """N: weights of the matrix multiplies per token (layers and LM head)."""
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (attention + mlp) + self.hidden * self.vocab

    def total_params(self) -> int:
        norms = self.layers * (2 * self.hidden + 2 * self.head_dim) + self.hidden
        head = 0 if self.tied else self.hidden * self.vocab
        return self.matmul_params() + norms + head

    def lora_params(self, rank: int) -> int:
        """Adapter weights of LoRA rank `rank` on every linear layer of the decoder (all-linear, LM head not)."""
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        pairs = [(self.hidden, q_out), (self.hidden, kv_out), (self.hidden, kv_out), (q_out, self.hidden),
                 (self.hidden, self.intermediate), (self.hidden, self.intermediate), (self.intermediate, self.hidden)]
        return self.layers * sum(rank * (a + b) for a, b in pairs)

    def attention_flops(self, seq_len: int) -> int:
        return 12 * self.layers * self.heads * self.head_dim * seq_len

    def train_flops_per_token(self, seq_len: int, *, lora_rank: int | None = None) -> int:
        n = self.matmul_params()
        if lora_rank is None:
            return 6 * n + self.attention_flops(seq_len)
        return 4 * n + 6 * self.lora_params(lora_rank) + self.attention_flops(seq_len)

    def config(self) -> dict:
        """Keyword arguments of `transformers.Qwen3Config` (token ids are the tokenizer's, added by the builder)."""
        return dict(vocab_size=self.vocab, hidden_size=self.hidden, intermediate_size=self.intermediate,
                    num_hidden_layers=self.layers, num_attention_heads=self.heads,
                    num_key_value_heads=self.kv_heads, head_dim=self.head_dim, tie_word_embeddings=self.tied,
                    max_position_embeddings=40960, rms_norm_eps=1e-6,
                    rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})


QWEN3 = {
    "Qwen3-0.6B": Shape("Qwen3-0.6B", hidden=1024, intermediate=3072, layers=28, heads=16, kv_heads=8, head_dim=128),
    "Qwen3-1.7B": Shape("Qwen3-1.7B", hidden=2048, intermediate=6144, layers=28, heads=16, kv_heads=8, head_dim=128),
    "Qwen3-4B": Shape("Qwen3-4B", hidden=2560, intermediate=9728, layers=36, heads=32, kv_heads=8, head_dim=128),
}
# --smoke: the same architecture, small enough for a CPU in seconds (the real vocabulary makes a CPU step 30x slower).
SMOKE = Shape("tiny-qwen3-arch", hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=2048)
SHAPES = {**QWEN3, "smoke": SMOKE}

# Dense bf16 tensor-core peak, FLOP/s, by a substring of torch.cuda.get_device_name() (vendor data sheets).
PEAK_BF16 = (("H200", 989.4e12), ("H100 PCIe", 756.0e12), ("H100", 989.4e12), ("A100", 312.0e12),
             ("L40S", 362.05e12), ("A10G", 70.0e12))


def peak_flops(device_name: str | None) -> float | None:
    """The GPU's dense bf16 peak, or None (a CPU, or a GPU not in the table: no MFU then)."""
    for key, peak in PEAK_BF16:
        if device_name and key in device_name:
            return peak
    return None


def mfu(tokens_per_s: float | None, flops_per_token: int, peak: float | None) -> float | None:
    if not tokens_per_s or peak is None:
        return None
    return tokens_per_s * flops_per_token / peak
