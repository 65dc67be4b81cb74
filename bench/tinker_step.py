"""Tinker API step time: the SDK's `forward_backward` + `optim_step` against `synth-ai backend serve`, per 1k
tokens, against our own SFT step on the same batch in one process (the same tiny Qwen3, LoRA rank 8, AdamW).

Ours is the whole path a Tinker user pays: the SDK encodes the batch as protobuf, the API stores the request, the
client's worker runs it and stores the result, and the SDK's future polls for it. The baseline is the step with
none of that: the SFT trainer's loss module (`SelectedTokenLoss`) over the same LoRA model, its backward and an
AdamW step. The ratio is baseline / ours (1.0: the API costs nothing).

    .venv/bin/python bench/tinker_step.py [--batch 8] [--length 256] [--steps 10]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from job_start import Backend, build_tiny, log  # noqa: E402 - bench/job_start.py, found through the line above

RANK = 8
LEARNING_RATE = 1e-4


def batch(vocab: int, size: int, length: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, vocab) for _ in range(length)] for _ in range(size)]


def ours(backend: Backend, model: Path, rows: list[list[int]], steps: int) -> float:
    """Seconds per step through the SDK (after one warm-up step)."""
    import tinker
    from tinker import types

    os.environ.update({"TINKER_API_KEY": f"tml-{backend.api.headers['Authorization'].split()[-1]}",
                       "TINKER_TELEMETRY": "0", "HF_HUB_OFFLINE": "1"})
    service = tinker.ServiceClient(base_url=f"http://127.0.0.1:{backend.port}")
    client = service.create_lora_training_client(base_model=str(model), rank=RANK).result()
    data = [types.Datum(model_input=types.ModelInput.from_ints(row[:-1]),
                        loss_fn_inputs={"target_tokens": row[1:], "weights": [1.0] * (len(row) - 1)})
            for row in rows]

    def step() -> None:
        client.forward_backward(data, "cross_entropy").result()
        client.optim_step(types.AdamParams(learning_rate=LEARNING_RATE)).result()

    step()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - started) / steps
    service.close("success").result()
    return seconds


def baseline(model: Path, rows: list[list[int]], steps: int) -> float:
    """Seconds per step of the SFT trainer's loss module, backward and AdamW on the same LoRA model."""
    import torch
    from transformers import AutoModelForCausalLM

    from synth_ai.backend.ml.loading import core_parts
    from synth_ai.backend.trainers.common import wrap_lora
    from synth_ai.backend.trainers.sft.token_loss import SelectedTokenLoss
    from synth_ai.config.tinker_settings import TinkerSettings

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    settings = TinkerSettings(model_id="bench", session_id="bench", base_model=str(model), lora_r=RANK,
                              lora_alpha=2.0 * RANK, seed=0)
    policy = wrap_lora(AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32), settings, False)
    loss = SelectedTokenLoss(policy, *core_parts(policy), bf16=False, image_pad=None, vision_dtype=None)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=LEARNING_RATE,
                                  betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0)

    def step() -> None:
        for row in rows:  # one datum at a time, as the worker runs a forward_backward's datums
            ids = torch.tensor([row])
            loss({"input_ids": ids, "labels": ids.clone(), "attention_mask": None}).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - started) / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    model = build_tiny()
    from transformers import AutoConfig

    rows = batch(AutoConfig.from_pretrained(str(model)).vocab_size, args.batch, args.length)
    tokens = args.batch * (args.length - 1)
    root = Path(tempfile.mkdtemp(prefix="tinker-step-"))
    backend = Backend(root, "tinker", warm=True, model=model)
    try:
        log(f"ours: {args.steps} SDK steps of {args.batch} x {args.length} tokens")
        sdk = ours(backend, model, rows, args.steps)
    finally:
        backend.stop()
    log("baseline: the same steps in one process")
    plain = baseline(model, rows, args.steps)
    per_k = 1000.0 / tokens
    print(f"tinker_step: ours {sdk * per_k:.3f} s per 1k tokens, baseline {plain * per_k:.3f} s per 1k tokens, "
          f"ratio {plain / sdk:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
