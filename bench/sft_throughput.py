"""Bench: SFT training tokens per second, our trainer against TRL's `SFTTrainer`.

Both sides train the same model on the same generated chat data with the same hyperparameters: full fine-tune, loss
on assistant tokens only, AdamW with 10% linear warmup then linear decay, batch 8, no gradient accumulation, fp32 on
CPU, one torch thread each (OMP_NUM_THREADS=1 unless you set it). Two sizes (`--size`):

- `tiny` (default): `synth-ai/tiny-qwen3` (0.14M parameters, built once into bench/.cache/sft-data/), chats of
  varied length (1-4 exchanges of the synthetic corpus: tool calls, reasoning), sequence length 512 (the chats are
  far shorter), lr 1e-3, 256 examples x 2 epochs. At this size a step is mostly Python overhead.
- `mid`: `synth-ai/random-qwen3-34m` (33.6M parameters, random weights, built once into bench/.cache/sft-data/),
  multi-turn chats of prose over the model's own lexicon, each 70-100% of the sequence length in tokens (512:
  320-506 tokens, 418 on average), lr 1e-4, 64 examples x 1 epoch. Here the model's arithmetic dominates.

- ours: `synth_ai.backend.trainers.sft.trainer.run_sft`, the function the backend's job worker calls, with a reporter
  that drops events and no checkpoint during the run (TRL saves none either); time = its training loop
  (`train_runtime_s`, data preparation and saving the final model excluded);
- baseline: TRL `SFTTrainer` with `assistant_only_loss=True` and the same chat template, otherwise its defaults
  (batches in random order, padded to their longest row) except, at `mid`, no gradient checkpointing (memory here
  does not need it, and it recomputes every layer's forward during the backward pass); time = from
  `on_train_begin` to `on_train_end` (dataset tokenization excluded).

Tokens per second = non-padding tokens fed to the model (each example's length, times epochs) / training time.
Peak RSS is each side's process (`ru_maxrss`). Each side runs in its own process, `--runs` times, ours and the
baseline interleaved; the median is reported. Ends with `sft_throughput: ours X tok/s, baseline Y tok/s, ratio Z`
(target ratio >= 1.5).

Reproduce from the repository root:

    .venv/bin/python bench/sft_throughput.py              # tiny: 3 runs each, 256 examples, 2 epochs
    .venv/bin/python bench/sft_throughput.py --runs 1 --examples 128
    .venv/bin/python bench/sft_throughput.py --size mid   # mid: 3 runs each, 64 examples, 1 epoch, length 512
    .venv/bin/python bench/sft_throughput.py --size mid --runs 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / "bench" / ".cache"
DATA_DIR = CACHE / "sft-data"
HYPER = {"warmup_ratio": 0.1, "per_device_batch": 8, "gradient_accumulation_steps": 1, "seed": 42}
# mid turns off TRL's default gradient checkpointing: memory is plentiful, and recomputing every layer's forward in
# the backward pass would make the comparison one of settings
SIZES = {
    "tiny": {"model": "synth-ai/tiny-qwen3", "learning_rate": 1e-3, "examples": 256, "epochs": 2,
             "trl_gradient_checkpointing": True},
    "mid": {"model": "synth-ai/random-qwen3-34m", "learning_rate": 1e-4, "examples": 64, "epochs": 1,
            "trl_gradient_checkpointing": False},
}

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


def make_mid_data(path: Path, examples: int, sequence_length: int, seed: int = 7) -> None:
    """Multi-turn chats of prose, each 70-100% of `sequence_length` tokens under the mid model's tokenizer."""
    from transformers import AutoTokenizer

    from synth_ai.backend.ml.mid import mid_prose
    from synth_ai.backend.store.model_store import ModelStore

    tokenizer = AutoTokenizer.from_pretrained(str(ModelStore(DATA_DIR).resolve(SIZES["mid"]["model"])))
    prose = mid_prose()
    rng = random.Random(seed)
    lines = []
    for _ in range(examples):
        budget = int(sequence_length * rng.uniform(0.7, 1.0))
        messages: list[dict] = []
        while True:
            turn = [{"role": "user", "content": prose.paragraph(rng, rng.randint(6, 24))},
                    {"role": "assistant", "content": prose.paragraph(rng, rng.randint(20, 120))}]
            words = turn[1]["content"].split()
            while len(words) > 4:  # the turn that crosses the budget ends the chat, its answer cut to fit
                turn[1]["content"] = " ".join(words)
                length = len(tokenizer.apply_chat_template(messages + turn, tokenize=True, return_dict=False))
                if length <= budget:
                    break
                words = words[:int(len(words) * 0.9)]
            if length > budget:  # no room left even for a short answer
                break
            messages += turn
            if length >= budget * 0.9:
                break
        lines.append(json.dumps({"messages": messages}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_ours(size: dict, data: Path, epochs: int, sequence_length: int) -> dict:
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.sft.trainer import run_sft

    cpu: dict[str, float] = {}

    class Quiet:  # drops events; notes the process CPU time when the loop starts and after its last step
        def event(self, type, message, data=None, level="info"):  # noqa: A002
            if type == "sft.training.started":
                cpu["begin"] = time.process_time()
            elif type == "sft.progress" and data and data["step"] == data["total_steps"]:
                cpu["end"] = time.process_time()

        def metric(self, name, step, value, phase="train"):
            pass

    store = ModelStore(DATA_DIR)
    with tempfile.TemporaryDirectory(prefix="sft-bench-ours-") as work:
        spec = {"model": size["model"], "job_id": "bench", "training_file_path": str(data),
                # no checkpoint during the run: TRL's side saves none either (save_strategy="no")
                "hyperparameters": {**HYPER, "learning_rate": size["learning_rate"], "n_epochs": epochs,
                                    "sequence_length": sequence_length, "train_kind": "full",
                                    "save_steps": 1_000_000}}
        result = run_sft(spec, workdir=Path(work), model_store=store, reporter=Quiet(), should_stop=lambda: False)
    return {"tokens": result["train_tokens"], "seconds": result["train_runtime_s"],
            "cpu_seconds": cpu["end"] - cpu["begin"],
            "loss_first": result["train_loss_first"], "loss_final": result["train_loss_final"],
            "steps": result["steps"], "peak_rss_mb": peak_rss_mb()}


def run_trl(size: dict, data: Path, epochs: int, sequence_length: int) -> dict:
    import torch
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from synth_ai.backend.store.model_store import ModelStore

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    path = ModelStore(DATA_DIR).resolve(size["model"])
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    dataset = load_dataset("json", data_files=str(data), split="train")

    class Clock(TrainerCallback):
        begin = end = cpu_begin = cpu_end = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            Clock.begin, Clock.cpu_begin = time.perf_counter(), time.process_time()

        def on_train_end(self, args, state, control, **kwargs):
            Clock.end, Clock.cpu_end = time.perf_counter(), time.process_time()

    with tempfile.TemporaryDirectory(prefix="sft-bench-trl-") as out:
        config = SFTConfig(
            output_dir=out, per_device_train_batch_size=HYPER["per_device_batch"],
            gradient_accumulation_steps=HYPER["gradient_accumulation_steps"], num_train_epochs=epochs,
            learning_rate=size["learning_rate"], warmup_steps=HYPER["warmup_ratio"], lr_scheduler_type="linear",
            max_length=sequence_length, assistant_only_loss=True, use_cpu=True, bf16=False, fp16=False,
            report_to=[], save_strategy="no", logging_steps=10_000, dataloader_num_workers=0,
            seed=HYPER["seed"], packing=False, disable_tqdm=True, dataset_num_proc=None,
            gradient_checkpointing=size["trl_gradient_checkpointing"],
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
    return {"tokens": tokens, "seconds": Clock.end - Clock.begin, "cpu_seconds": Clock.cpu_end - Clock.cpu_begin,
            "loss_final": result.training_loss,
            "steps": result.global_step, "peak_rss_mb": peak_rss_mb()}


def worker(kind: str, args: argparse.Namespace) -> None:
    run = run_ours if kind == "ours" else run_trl
    result = run(SIZES[args.size], args.data, args.epochs, args.sequence_length)
    print("RESULT " + json.dumps(result), flush=True)


def spawn(kind: str, data: Path, args: argparse.Namespace, epochs: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, __file__, "--worker", kind, "--size", args.size, "--data", str(data),
                           "--epochs", str(epochs), "--sequence-length", str(args.sequence_length)],
                          capture_output=True, text=True, env=env, cwd=REPO)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-5000:])
    raise SystemExit(f"{kind} run failed (exit {proc.returncode})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny", help="model and data (see the docstring)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--examples", type=int, help="training examples (default: 256 tiny, 64 mid)")
    parser.add_argument("--epochs", type=int, help="epochs (default: 2 tiny, 1 mid)")
    parser.add_argument("--sequence-length", type=int, default=512)
    parser.add_argument("--worker", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = SIZES[args.size]
    args.examples = args.examples or size["examples"]
    args.epochs = args.epochs or size["epochs"]
    if args.worker:
        worker(args.worker, args)
        return

    from synth_ai.backend.store.model_store import ModelStore

    ModelStore(DATA_DIR).resolve(size["model"])  # built once, untimed
    if args.size == "mid":
        data = CACHE / f"sft_bench-mid-{args.examples}-{args.sequence_length}.jsonl"
        make_mid_data(data, args.examples, args.sequence_length)
    else:
        data = make_tiny_data(args)
    print(f"data: {data} ({args.examples} examples), model {size['model']} (cache {DATA_DIR}), epochs {args.epochs}, "
          f"sequence length {args.sequence_length}, lr {size['learning_rate']}, hyperparameters {HYPER}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    ours, base, cpu_ours, cpu_base = [], [], [], []
    for run in range(args.runs):
        for kind, bucket, cpu in (("ours", ours, cpu_ours), ("trl", base, cpu_base)):
            result = spawn(kind, data, args, args.epochs)
            rate = result["tokens"] / result["seconds"]
            bucket.append(rate)
            cpu.append(result["tokens"] / result["cpu_seconds"])
            what = "last step" if kind == "ours" else "mean over training"
            print(f"run {run + 1} {kind:4s}: {result['tokens']} tokens in {result['seconds']:.2f} s = {rate:,.0f} tok/s "
                  f"({result['cpu_seconds']:.2f} CPU s = {cpu[-1]:,.0f} tok/CPU-s), {result['steps']} steps, "
                  f"loss {result['loss_final']:.3f} ({what}), peak RSS {result['peak_rss_mb']:.0f} MB", flush=True)
    x, y = statistics.median(ours), statistics.median(base)
    print(f"per CPU second (less sensitive to a busy machine): ours {statistics.median(cpu_ours):,.0f}, "
          f"baseline {statistics.median(cpu_base):,.0f}, ratio {statistics.median(cpu_ours) / statistics.median(cpu_base):.2f}")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"reproduce: .venv/bin/python bench/sft_throughput.py --size {args.size} "
          f"--runs {args.runs} --examples {args.examples} --epochs {args.epochs} "
          f"--sequence-length {args.sequence_length}")
    print(f"sft_throughput: ours {x:,.0f} tok/s, baseline {y:,.0f} tok/s, ratio {x / y:.2f}")


def make_tiny_data(args: argparse.Namespace) -> Path:
    data = CACHE / f"sft_bench-{args.examples}.jsonl"
    make_data(data, args.examples)
    return data


if __name__ == "__main__":
    main()
