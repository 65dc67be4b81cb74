"""Bench: generated tokens per second of the backend's chat completions under concurrent load, against sequential
`model.generate` calls on the same model.

- ours: the embedded backend (`synth-ai backend serve`, its own process), `--requests` chat completions sent over
  HTTP from `C` client threads at once (C = 8 and 32): concurrent requests decode in one running batch (continuous batching);
- baseline: the same prompts, one `model.generate` call each, one after another, on the same model loaded the same
  way (`synth_ai.backend.ml.loading`), no HTTP.

Both sample at temperature 1.0 with at most `--max-tokens` new tokens per request; tokens/s = completion tokens
(up to end-of-turn) / wall seconds. The model is `synth-ai/tiny-qwen3` (built once into bench/.cache/inference-data),
fp32 on CPU, one torch thread on each side (OMP_NUM_THREADS=1 unless you set it). Ends with
`inference: ours X tok/s, baseline Y tok/s, ratio Z` for concurrency 8 (ratio = ours / baseline: above 1 means
ours is faster); the concurrency-32 figure is printed the line before.

Rounds (`--rounds`, default 3) interleave the baseline and ours, so both see the same machine load; the medians
are reported, the ratio being the median of the rounds' ratios.

Reproduce from the repository root:

    .venv/bin/python bench/inference.py
    .venv/bin/python bench/inference.py --requests 32 --max-tokens 24
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = REPO / "bench" / ".cache" / "inference-data"
MODEL_ID = "synth-ai/tiny-qwen3"
PROMPTS = ["What is 3 plus 4?", "Tell me a short story about a fox.", "Count: one two three", "What color is the sky?",
           "Name a city in France.", "What is 10 minus 2?", "Describe the sea.", "Why is grass green?"]

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(REPO / "src"))


def build_model() -> None:
    subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                    "from synth_ai.backend.store.model_store import ModelStore; ModelStore(Path(sys.argv[1])).resolve(sys.argv[2])",
                    str(DATA_DIR), MODEL_ID], check=True, cwd=REPO)


def baseline_runner(max_tokens: int):
    """A function `run(requests) -> tok/s` of sequential `generate` calls (model loaded once, warmed up)."""
    import torch

    from synth_ai.backend.inference.engine import describe_model
    from synth_ai.backend.ml import loading
    from synth_ai.backend.store.model_store import ModelStore

    torch.set_num_threads(1)
    path = ModelStore(DATA_DIR).resolve(MODEL_ID)
    where = loading.placement()
    model = loading.load_model(path, where).eval()
    loaded = describe_model(MODEL_ID, path, model, loading.load_tokenizer(path), vision=False, device=where.device)
    tokenizer = loaded.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else loaded.eos_ids[0]

    def one(prompt: str) -> int:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], chat_template=loaded.template,
                                             add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**ids, max_new_tokens=max_tokens, do_sample=True, temperature=1.0, top_p=1.0,
                                 top_k=0, eos_token_id=loaded.eos_ids, pad_token_id=pad)
        row = out[0, ids["input_ids"].shape[1]:].tolist()
        return next((i for i, t in enumerate(row) if t in loaded.eos_ids), len(row))

    one(PROMPTS[0])  # warm-up

    def run(requests: int) -> float:
        started, tokens = time.perf_counter(), 0
        for i in range(requests):
            tokens += one(PROMPTS[i % len(PROMPTS)])
        return tokens / (time.perf_counter() - started)

    return run


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ours(concurrency_levels: list[int], requests: int, max_tokens: int, rounds: int, base_run) -> list[dict]:
    """Per round: the baseline, then ours at each concurrency (interleaved, so both see the same machine load)."""
    import httpx

    port = free_port()
    env = dict(os.environ, SYNTH_AI_HOME=str(DATA_DIR))
    proc = subprocess.Popen([sys.executable, "-m", "synth_ai", "backend", "serve", "--port", str(port),
                             "--log-level", "warning"], env=env, cwd=REPO, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)
        key = json.loads((DATA_DIR / "backend_keys.json").read_text())["default"]
        client = httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=600,
                              limits=httpx.Limits(max_connections=max(concurrency_levels) + 2))

        def send(prompt: str) -> int:
            body = {"model": MODEL_ID, "messages": [{"role": "user", "content": prompt}], "temperature": 1.0,
                    "top_p": 1.0, "max_tokens": max_tokens}
            response = client.post(f"{url}/api/inference/v1/chat/completions", json=body)
            response.raise_for_status()
            return response.json()["usage"]["completion_tokens"]

        send(PROMPTS[0])  # loads the model
        results = []
        for _ in range(rounds):
            figures = {"baseline": base_run(requests)}
            for concurrency in concurrency_levels:
                figures[concurrency] = _measure(send, concurrency, requests)
            print("round: " + ", ".join(f"{k}: {v:.0f} tok/s" for k, v in figures.items()), flush=True)
            results.append(figures)
        return results
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _measure(send, concurrency: int, requests: int) -> float:
    queue = list(range(requests))
    lock, counted = threading.Lock(), [0]

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                i = queue.pop()
            n = send(PROMPTS[i % len(PROMPTS)])
            with lock:
                counted[0] += n

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counted[0] / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=64, help="requests per measurement (default 64)")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3); medians reported")
    args = parser.parse_args()
    if not (DATA_DIR / "models").exists():
        build_model()
    results = ours([8, 32], args.requests, args.max_tokens, args.rounds, baseline_runner(args.max_tokens))
    print(f"model {MODEL_ID}, {args.requests} requests, at most {args.max_tokens} new tokens, temperature 1.0, "
          f"{args.rounds} rounds (medians; ratio = median of the rounds' ratios)")
    base = statistics.median(r["baseline"] for r in results)
    for level in (32, 8):
        mine = statistics.median(r[level] for r in results)
        ratio = statistics.median(r[level] / r["baseline"] for r in results)
        name = "inference" if level == 8 else "inference concurrency 32"
        print(f"{name}: ours {mine:.0f} tok/s, baseline {base:.0f} tok/s, ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
