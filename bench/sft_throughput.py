"""Bench: SFT training tokens per second, our trainer against TRL's `SFTTrainer`.

Both train the same tiny model (`synth-ai/tiny-qwen3`, built once into bench/.cache/sft-data/), on the same
generated chat data (varied lengths, tool calls, reasoning; written to bench/.cache/sft_bench.jsonl), with the same
hyperparameters: full fine-tune, loss on assistant tokens only, AdamW, lr 1e-3 with 10% linear warmup then linear
decay, batch 8, no gradient accumulation, sequence length 512, fp32 on CPU, one torch thread each
(OMP_NUM_THREADS=1 unless you set it).

- ours: `synth_ai.backend.trainers.sft.trainer.run_sft`, the function the backend's job worker calls, with a reporter that
  drops events; time = its training loop (`train_runtime_s`, data preparation and saving excluded);
- baseline: TRL `SFTTrainer` with `assistant_only_loss=True` and the same chat template; time = from
  `on_train_begin` to `on_train_end` (dataset tokenization excluded).

Tokens per second = non-padding tokens fed to the model (each example's length, times epochs) / training time.
Each side runs in its own process, `--runs` times, ours and the baseline interleaved; the median is reported.
Ends with `sft_throughput: ours X tok/s, baseline Y tok/s, ratio Z` (target ratio >= 1.5).

Reproduce from the repository root:

    .venv/bin/python bench/sft_throughput.py              # 3 runs each, 256 examples, 2 epochs
    .venv/bin/python bench/sft_throughput.py --runs 1 --examples 128
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / "bench" / ".cache"
DATA_DIR = CACHE / "sft-data"
MODEL_ID = "synth-ai/tiny-qwen3"
HYPER = {"learning_rate": 1e-3, "warmup_ratio": 0.1, "per_device_batch": 8, "gradient_accumulation_steps": 1,
         "sequence_length": 512, "seed": 42}

sys.path.insert(0, str(REPO / "src"))


def make_data(path: Path, examples: int, seed: int = 7) -> None:
    """Chats of varied length: 1-4 exchanges drawn from the synthetic corpus, some with tools."""
    from synth_ai.backend.ml.corpus import conversation

    rng = random.Random(seed)
    lines = []
    for _ in range(examples):
        turns = rng.randint(1, 4)
        messages, tools = [], None
        for _ in range(turns):
            conv = conversation(rng)
            body = [m for m in conv["messages"] if m["role"] != "system"]
            messages.extend(body)
            tools = tools or conv.get("tools")
        record = {"messages": messages}
        if tools:
            record["tools"] = tools
        lines.append(json.dumps(record))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def run_ours(data: Path, epochs: int) -> dict:
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.sft.trainer import run_sft

    class Quiet:
        def event(self, type, message, data=None, level="info"):  # noqa: A002
            pass

        def metric(self, name, step, value, phase="train"):
            pass

    store = ModelStore(DATA_DIR)
    with tempfile.TemporaryDirectory(prefix="sft-bench-ours-") as work:
        spec = {"model": MODEL_ID, "job_id": "bench", "training_file_path": str(data),
                "hyperparameters": {**HYPER, "n_epochs": epochs, "train_kind": "full"}}
        result = run_sft(spec, workdir=Path(work), model_store=store, reporter=Quiet(), should_stop=lambda: False)
    return {"tokens": result["train_tokens"], "seconds": result["train_runtime_s"],
            "loss_first": result["train_loss_first"], "loss_final": result["train_loss_final"],
            "steps": result["steps"]}


def run_trl(data: Path, epochs: int) -> dict:
    import torch
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from synth_ai.backend.store.model_store import ModelStore

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    path = ModelStore(DATA_DIR).resolve(MODEL_ID)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    dataset = load_dataset("json", data_files=str(data), split="train")

    class Clock(TrainerCallback):
        begin = end = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            Clock.begin = time.perf_counter()

        def on_train_end(self, args, state, control, **kwargs):
            Clock.end = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="sft-bench-trl-") as out:
        config = SFTConfig(
            output_dir=out, per_device_train_batch_size=HYPER["per_device_batch"],
            gradient_accumulation_steps=HYPER["gradient_accumulation_steps"], num_train_epochs=epochs,
            learning_rate=HYPER["learning_rate"], warmup_steps=HYPER["warmup_ratio"], lr_scheduler_type="linear",
            max_length=HYPER["sequence_length"], assistant_only_loss=True, use_cpu=True, bf16=False, fp16=False,
            report_to=[], save_strategy="no", logging_steps=10_000, dataloader_num_workers=0,
            seed=HYPER["seed"], packing=False, disable_tqdm=True, dataset_num_proc=None,
        )
        trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                             callbacks=[Clock()])
        tokens = sum(len(ids) for ids in trainer.train_dataset["input_ids"]) * epochs
        losses = []

        class Losses(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and "loss" in logs:
                    losses.append(logs["loss"])

        trainer.add_callback(Losses())
        result = trainer.train()
    return {"tokens": tokens, "seconds": Clock.end - Clock.begin, "loss_final": result.training_loss,
            "steps": result.global_step}


def worker(kind: str, data: Path, epochs: int) -> None:
    result = run_ours(data, epochs) if kind == "ours" else run_trl(data, epochs)
    print("RESULT " + json.dumps(result), flush=True)


def spawn(kind: str, data: Path, epochs: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, __file__, "--worker", kind, "--data", str(data), "--epochs", str(epochs)],
                          capture_output=True, text=True, env=env, cwd=REPO)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-5000:])
    raise SystemExit(f"{kind} run failed (exit {proc.returncode})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--worker", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.data, args.epochs)
        return

    data = CACHE / f"sft_bench-{args.examples}.jsonl"
    make_data(data, args.examples)
    print(f"data: {data} ({args.examples} examples), model {MODEL_ID} (cache {DATA_DIR}), epochs {args.epochs}, "
          f"hyperparameters {HYPER}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}", flush=True)
    spawn("ours", data, 1) if not (DATA_DIR / "models").exists() else None  # build the tiny model once, untimed
    ours, base = [], []
    for run in range(args.runs):
        for kind, bucket in (("ours", ours), ("trl", base)):
            result = spawn(kind, data, args.epochs)
            rate = result["tokens"] / result["seconds"]
            bucket.append(rate)
            what = "last step" if kind == "ours" else "mean over training"
            print(f"run {run + 1} {kind:4s}: {result['tokens']} tokens in {result['seconds']:.2f} s = {rate:,.0f} tok/s, "
                  f"{result['steps']} steps, loss {result['loss_final']:.3f} ({what})", flush=True)
    x, y = statistics.median(ours), statistics.median(base)
    print("reproduce: .venv/bin/python bench/sft_throughput.py "
          f"--runs {args.runs} --examples {args.examples} --epochs {args.epochs}")
    print(f"sft_throughput: ours {x:,.0f} tok/s, baseline {y:,.0f} tok/s, ratio {x / y:.2f}")


if __name__ == "__main__":
    main()
