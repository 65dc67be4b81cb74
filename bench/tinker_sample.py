"""Tinker sampling throughput: a group of sample calls in flight at once (as tinker-cookbook's RL loop sends a
group: one call per sample) against the same calls one after another, through the SDK against
`synth-ai backend serve` on the tiny Qwen3 (built-in engine, LoRA rank 8).

Ours is the group sent together, which the client's worker decodes in one running batch (continuous batching). The
baseline is each call alone: what a sampler that serves one call at a time costs. Both sample the same tokens (each
call has its own seed). The ratio is baseline / ours (above 1: batching pays).

    .venv/bin/python bench/tinker_sample.py [--group 8] [--tokens 32] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from job_start import Backend, build_tiny, log  # noqa: E402 - bench/job_start.py, found through the line above

RANK = 8
PROMPT = "Question: what is twelve plus thirty? Answer:"


def measure(backend: Backend, model: Path, group: int, tokens: int, rounds: int) -> tuple[float, float]:
    """Seconds per group: sent together, then one call at a time (after a warm-up of each)."""
    import tinker
    from tinker import types

    os.environ.update({"TINKER_API_KEY": f"tml-{backend.api.headers['Authorization'].split()[-1]}",
                       "TINKER_TELEMETRY": "0", "HF_HUB_OFFLINE": "1"})
    service = tinker.ServiceClient(base_url=f"http://127.0.0.1:{backend.port}")
    client = service.create_lora_training_client(base_model=str(model), rank=RANK).result()
    sampler = client.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(client.get_tokenizer().encode(PROMPT))

    def call(seed: int) -> object:  # no stop: every call samples exactly `tokens`
        return sampler.sample(prompt, num_samples=1, sampling_params=types.SamplingParams(
            max_tokens=tokens, seed=seed, stop=[]))

    def together() -> None:
        for future in [call(seed) for seed in range(group)]:
            future.result()

    def one_by_one() -> None:
        for seed in range(group):
            call(seed).result()

    timings = []
    for run in (together, one_by_one):
        run()
        started = time.perf_counter()
        for _ in range(rounds):
            run()
        timings.append((time.perf_counter() - started) / rounds)
    service.close("success").result()
    return timings[0], timings[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    model = build_tiny()
    backend = Backend(Path(tempfile.mkdtemp(prefix="tinker-sample-")), "tinker", warm=True, model=model)
    try:
        log(f"{args.rounds} rounds of {args.group} sample calls x {args.tokens} tokens, together then one by one")
        ours, baseline = measure(backend, model, args.group, args.tokens, args.rounds)
    finally:
        backend.stop()
    print(f"tinker_sample: ours {ours:.3f} s per group of {args.group}, baseline {baseline:.3f} s, "
          f"ratio {baseline / ours:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
