"""What the GPU kit measures, in which order, and how much time each step may take.

The order puts what issue 38 asks first, so a run cut short by its budget still has it (bench/gpu/README.md has the
time estimate behind it):

1. the RL update alone at 16k tokens for the anchors' model (Qwen3-0.6B: prime-rl's RL anchor), the new defaults
   then the old path;
2. Qwen3-4B's full and LoRA GSPO update on the product docs' shape (4 prompts x group 8, 2k prompt + 1k completion:
   does it fit one 80 GiB GPU);
3. the anchors' model's GSPO iteration, ours then TRL's GRPO (both with activation checkpointing, TRL's default);
4. the RL update at 16k for the other models (new, old);
5. then, model by model, SFT full at 8k, the other models' GSPO pairs, SFT LoRA at 8k, SFT at 2k.

Each measurement is a pair: ours then TRL on the same work, or (RL update at 16k) our new defaults then our old
path; the Qwen3-4B update rows stand alone (new defaults only: the old path cannot hold the step).

Budget: `min_s` is the least time a step needs (a pair starts only when both of its sides' minimums are left), and
`max_s` the most it may take before it is stopped (and recorded as an error). Both are guesses for one H100/H200
and include the process start (python, torch, transformers imports) and model loading; they only decide what is
skipped, never what is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GPU_BUDGET_S = 480.0  # the 8 minutes, wheel install included
SMOKE_BUDGET_S = 170.0  # the smoke must finish within 3 minutes on a CPU
RESERVE_S = 8.0  # kept back for writing the results
TOKENS_PER_STEP = 8192  # rows per SFT step = TOKENS_PER_STEP // seq_len, so every length trains the same tokens
SFT_WARMUP, SFT_STEPS = 2, 5
GSPO = {"batch": 4, "group": 8, "new_tokens": 256, "iterations": 3}
ANCHOR_MODEL = "Qwen3-0.6B"  # prime-rl's and Unsloth's anchors are on this model: its rows come first

# The RL update alone at 16k tokens a sample (prime-rl's RL anchor's shape): different prompts, one optimizer step.
RL_UPDATE = {"prompt": 512, "completion": 16384 - 512, "samples": 2, "group": 1, "warmup": 1, "steps": 2}
# The product docs' Qwen3-4B RL step: 4 prompts x group 8 of 2k prompt + 1k completion tokens, shared prompts.
RL_4B = {"prompt": 2048, "completion": 1024, "samples": 32, "group": 8, "warmup": 1, "steps": 1}
# The old path (before issue 38), as the 2026-11-27 run measured it: the LM head's logits materialised, no activation
# checkpointing, no token budget (one micro-batch for the step) but one sample a forward pass (the only way the old
# trainer held a 16k sample). The new path sets nothing: the defaults a user gets.
OLD_PATH = {"chunked_logprobs": False, "activation_checkpointing": False, "micro_batch_tokens": 1 << 30,
            "max_accumulated_minibatch": 1}
FITS_GIB = 80.0  # the verdict: peak allocated GPU memory below this fits one 80 GiB GPU
# Targets printed beside the rows (issue 38): prime-rl's self-reported H100 figures; the 4B step with headroom.
TARGET_16K = {"peak_gib_max": 12.5, "tokens_per_s_min": 11_900}
TARGET_4B = {"peak_gib_below": 75.0}

# Per model and step: (min seconds, max seconds).
TIMES = {
    "Qwen3-0.6B": {"build": (20, 60), "sft": (25, 75), "gspo": (35, 120), "rl": (18, 90)},
    "Qwen3-1.7B": {"build": (20, 90), "sft": (35, 100), "gspo": (45, 150), "rl": (20, 120)},
    "Qwen3-4B": {"build": (25, 150), "sft": (60, 150), "gspo": (60, 180), "rl": (25, 150), "update": (35, 150)},
    "smoke": {"build": (5, 60), "sft": (5, 90), "gspo": (5, 120), "rl": (5, 90), "update": (5, 90)},
}
# Activation checkpointing where the full model's fp32 weights, gradients and AdamW state leave too little of an
# 80 GiB GPU for 8k tokens of activations; both sides get the same setting.
CHECKPOINTING = {("Qwen3-1.7B", "full"), ("Qwen3-4B", "full"), ("Qwen3-4B", "lora")}


@dataclass
class Step:
    bench: str  # sft | gspo | rl
    side: str  # ours | trl (sft, gspo); new | old (rl: our new defaults, our old path)
    model: str
    mode: str  # full | lora
    seq_len: int  # SFT: the sequence length; GSPO: new tokens per completion; RL: prompt + completion
    min_s: float
    max_s: float
    job: dict[str, Any] = field(default_factory=dict)

    @property
    def pair(self) -> str:
        return f"{self.bench}/{self.model}/{self.mode}/{self.seq_len}"

    @property
    def id(self) -> str:
        return f"{self.pair}/{self.side}"


def sft_pair(model: str, mode: str, seq_len: int, *, warmup: int = SFT_WARMUP, steps: int = SFT_STEPS) -> list[Step]:
    job = {"mode": mode, "seq_len": seq_len, "batch": max(1, TOKENS_PER_STEP // seq_len), "warmup": warmup,
           "steps": steps, "activation_checkpointing": (model, mode) in CHECKPOINTING}
    low, high = TIMES[model]["sft"]
    return [Step("sft", side, model, mode, seq_len, low, high, dict(job)) for side in ("ours", "trl")]


def gspo_pair(model: str, gspo: dict[str, int]) -> list[Step]:
    low, high = TIMES[model]["gspo"]
    return [Step("gspo", side, model, "full", gspo["new_tokens"], low, high, dict(gspo)) for side in ("ours", "trl")]


def rl_step(model: str, mode: str, side: str, shape: dict[str, int], training: dict[str, Any],
            targets: dict[str, float] | None = None, *, kind: str = "rl") -> Step:
    """Our GSPO update alone on `shape` (gpu_gspo.run_update) with `training` as the `[training]` keys it sets."""
    low, high = TIMES[model][kind]
    job = {**shape, "mode": mode, "training": dict(training), "targets": dict(targets or {})}
    return Step("rl", side, model, mode, shape["prompt"] + shape["completion"], low, high, job)


def rl_pair(model: str, shape: dict[str, int], new: dict[str, Any] | None = None,
            targets: dict[str, float] | None = None) -> list[Step]:
    """The new defaults (plus `new`), then the old path, on the same samples."""
    return [rl_step(model, "full", "new", shape, new or {}, targets), rl_step(model, "full", "old", shape, OLD_PATH)]


def gpu_plan(models: list[str]) -> list[Step]:
    anchor = ANCHOR_MODEL if ANCHOR_MODEL in models else models[0]
    steps = rl_pair(anchor, RL_UPDATE, targets=TARGET_16K if anchor == ANCHOR_MODEL else None)
    if "Qwen3-4B" in models:
        steps += [rl_step("Qwen3-4B", mode, "new", RL_4B, {}, TARGET_4B, kind="update") for mode in ("full", "lora")]
    steps += gspo_pair(anchor, GSPO)
    steps += [step for model in models if model != anchor for step in rl_pair(model, RL_UPDATE)]
    for model in models:
        steps += sft_pair(model, "full", 8192) + ([] if model == anchor else gspo_pair(model, GSPO))
        steps += sft_pair(model, "lora", 8192) + sft_pair(model, "full", 2048) + sft_pair(model, "lora", 2048)
    return steps


def smoke_plan() -> list[Step]:
    """The same code paths on the tiny architecture, in the GPU plan's order: the RL update pair (2 x 256 tokens, one
    sample a pass on both paths as at 16k), the full and LoRA update on grouped samples (2 prompts x group 4, 32 + 16
    tokens, 2 samples a micro-batch as Qwen3-4B's 3k-token samples get from the default budget), a GSPO pair, an SFT
    pair (full, 256 tokens). The new path sets checkpointing on, as a GPU's default is (the CPU's is off)."""
    update = {"prompt": 64, "completion": 192, "samples": 2, "group": 1, "warmup": 1, "steps": 2}
    grouped = {"prompt": 32, "completion": 16, "samples": 8, "group": 4, "warmup": 1, "steps": 1}
    steps = rl_pair("smoke", update, {"activation_checkpointing": True, "micro_batch_tokens": 256}, TARGET_16K)
    steps += [rl_step("smoke", mode, "new", grouped, {"activation_checkpointing": True, "micro_batch_tokens": 96},
                      TARGET_4B, kind="update") for mode in ("full", "lora")]
    steps += gspo_pair("smoke", {"batch": 2, "group": 4, "new_tokens": 16, "iterations": 3})
    sft = sft_pair("smoke", "full", 256, warmup=1, steps=3)
    for step in sft:
        step.job["batch"] = 2
    return steps + sft


def data_needs(steps: list[Step]) -> dict[int, int]:
    """SFT rows to build per sequence length: enough for the longest run at that length."""
    needs: dict[int, int] = {}
    for step in steps:
        if step.bench == "sft":
            rows = step.job["batch"] * (step.job["warmup"] + step.job["steps"])
            needs[step.seq_len] = max(needs.get(step.seq_len, 0), rows)
    return needs
