"""What the GPU kit measures, in which order, and how much time each step may take.

The order puts the comparisons that matter most first, so a run cut short by its budget still has them:
Qwen3-0.6B SFT full at 8k (prime-rl's and Unsloth's anchors), its GSPO iteration, SFT LoRA at 8k, then 2k; then
the same for Qwen3-1.7B, then Qwen3-4B. Each measurement is a pair: ours, then TRL on the same work, except the
GSPO update alone at 16k (prime-rl's RL anchor), which TRL cannot run alone: ours only, right after 0.6B's GSPO
pair and last for the larger models.

Budget: `min_s` is the least time a step needs (a pair starts only when both of its sides' minimums are left), and
`max_s` the most it may take before it is stopped (and recorded as an error). Both are guesses for one H100 and
include the process start (python, torch, transformers imports) and model loading; they only decide what is
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

RL_UPDATE = {"seq_len": 16384, "samples": 4, "warmup": 1, "steps": 2}
# Per model and step: (min seconds, max seconds).
TIMES = {
    "Qwen3-0.6B": {"build": (20, 60), "sft": (25, 75), "gspo": (35, 120), "rl": (25, 90)},
    "Qwen3-1.7B": {"build": (30, 90), "sft": (35, 100), "gspo": (45, 150), "rl": (40, 120)},
    "Qwen3-4B": {"build": (60, 150), "sft": (60, 150), "gspo": (60, 180), "rl": (60, 150)},
    "smoke": {"build": (5, 60), "sft": (5, 90), "gspo": (5, 120), "rl": (5, 90)},
}
# Activation checkpointing where the full model's fp32 weights, gradients and AdamW state leave too little of an
# 80 GiB GPU for 8k tokens of activations; both sides get the same setting.
CHECKPOINTING = {("Qwen3-1.7B", "full"), ("Qwen3-4B", "full"), ("Qwen3-4B", "lora")}


@dataclass
class Step:
    bench: str  # sft | gspo
    side: str  # ours | trl
    model: str
    mode: str  # full | lora
    seq_len: int  # SFT: the sequence length; GSPO: new tokens per completion
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


def rl_update(model: str, rl: dict[str, int]) -> list[Step]:
    low, high = TIMES[model]["rl"]
    return [Step("rl", "ours", model, "full", rl["seq_len"], low, high, dict(rl))]


def gpu_plan(models: list[str]) -> list[Step]:
    steps: list[Step] = []
    for model in models:
        first = model == "Qwen3-0.6B"  # the anchors' model: its RL update comes early
        steps += sft_pair(model, "full", 8192) + gspo_pair(model, GSPO) + (rl_update(model, RL_UPDATE) if first else [])
        steps += sft_pair(model, "lora", 8192) + sft_pair(model, "full", 2048) + sft_pair(model, "lora", 2048)
        steps += [] if first else rl_update(model, RL_UPDATE)
    return steps


def smoke_plan() -> list[Step]:
    """The same code path on the tiny architecture: an SFT pair (full, 256 tokens), a GSPO pair, the RL update."""
    steps = sft_pair("smoke", "full", 256, warmup=1, steps=3)
    for step in steps:
        step.job["batch"] = 2
    steps += gspo_pair("smoke", {"batch": 2, "group": 4, "new_tokens": 16, "iterations": 3})
    return steps + rl_update("smoke", {"seq_len": 256, "samples": 2, "warmup": 1, "steps": 2})


def data_needs(steps: list[Step]) -> dict[int, int]:
    """SFT rows to build per sequence length: enough for the longest run at that length."""
    needs: dict[int, int] = {}
    for step in steps:
        if step.bench == "sft":
            rows = step.job["batch"] * (step.job["warmup"] + step.job["steps"])
            needs[step.seq_len] = max(needs.get(step.seq_len, 0), rows)
    return needs
