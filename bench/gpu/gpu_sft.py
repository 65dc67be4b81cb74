"""SFT throughput, both sides on the same rows and the same hyperparameters.

- ours: `synth_ai.backend.trainers.sft.trainer.run_sft`, the function the backend's job worker calls;
- baseline: TRL `SFTTrainer` (`assistant_only_loss=True`, the same chat template and tokenizer).

Both: full fine-tune with fp32 master weights and bf16 autocast on a GPU (LoRA: the base in bf16, rank 16, alpha 32,
dropout 0.05, all linear layers), AdamW (fused on a GPU), lr 1e-5 (LoRA 2e-4), linear decay, grad-norm clip 1.0,
`batch` rows per optimizer step, no gradient accumulation, activation checkpointing as the job says, SDPA attention.
No packing on either side: every row already holds about `seq_len` tokens (`gpu_inputs.sft_rows`), and `batch` is chosen
so that an optimizer step trains about 8,192 tokens at every sequence length.

Timing: the wall time between the ends of successive optimizer steps (each side's step ends with the loss on the
host, so the GPU has finished it); the first `warmup` steps are not counted. Tokens per step = `batch` x the rows'
mean length (rows differ by a few per cent at most).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

LORA = {"r": 16, "alpha": 32, "dropout": 0.05}


def timing(ends: list[float], warmup: int, tokens_per_step: float) -> dict[str, Any]:
    """Step times from step-end timestamps, the first `warmup` steps left out."""
    gaps = [b - a for a, b in pairwise(ends)][max(0, warmup - 1):]
    if not gaps:
        raise RuntimeError(f"only {len(ends)} steps finished: nothing left to time after {warmup} warm-up steps")
    return {"step_s": statistics.median(gaps), "steps_timed": len(gaps),
            "tokens_per_s": tokens_per_step * len(gaps) / sum(gaps), "step_times": [round(g, 4) for g in gaps]}


def trl_model(path: str, dtype: Any) -> Any:
    """The model TRL trains (both benches): loaded as our trainers load it (SDPA attention, from the folder only)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa", local_files_only=True)


def trl_clock(ends: list[float]) -> Any:
    """A TRL callback that appends the time each optimizer step ends, the GPU synchronised first."""
    import torch
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            ends.append(time.perf_counter())

    return Clock()


def run_ours(job: dict[str, Any]) -> dict[str, Any]:
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.sft.trainer import run_sft

    ends: list[float] = []

    class Clock:
        def event(self, type, message, data=None, level="info"):  # noqa: A002
            pass

        def metric(self, name, step, value, phase="train"):
            if name == "train.loss":
                ends.append(time.perf_counter())

    steps = job["warmup"] + job["steps"]
    hyper = {"train_kind": job["mode"], "learning_rate": 2e-4 if job["mode"] == "lora" else 1e-5,
             "per_device_batch": job["batch"], "gradient_accumulation_steps": 1, "total_steps": steps,
             "sequence_length": job["seq_len"], "save_steps": steps + 1, "max_grad_norm": 1.0, "seed": 42,
             "parallelism": {"activation_checkpointing": job["activation_checkpointing"]}}
    if job["mode"] == "lora":
        hyper.update(lora_rank=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"])
    with tempfile.TemporaryDirectory(prefix="kit-sft-", dir=job["scratch"]) as work:
        spec = {"model": job["model_path"], "job_id": "gpu-kit", "training_file_path": job["data"],
                "hyperparameters": hyper}
        run_sft(spec, workdir=Path(work), model_store=ModelStore(Path(work) / "store"), reporter=Clock(),
                should_stop=lambda: False)
    return timing(ends, job["warmup"], job["batch"] * job["data_tokens_mean"])


def run_trl(job: dict[str, Any]) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    cuda = torch.cuda.is_available()
    lora = job["mode"] == "lora"
    tokenizer = AutoTokenizer.from_pretrained(job["model_path"], local_files_only=True)
    dtype = torch.bfloat16 if (lora and cuda) else torch.float32
    model = trl_model(job["model_path"], dtype)
    rows = [json.loads(line) for line in Path(job["data"]).read_text().splitlines() if line.strip()]
    ends: list[float] = []
    steps = job["warmup"] + job["steps"]
    checkpointing = job["activation_checkpointing"]
    with tempfile.TemporaryDirectory(prefix="kit-sft-trl-", dir=job["scratch"]) as out:
        config = SFTConfig(
            output_dir=out, per_device_train_batch_size=job["batch"], gradient_accumulation_steps=1,
            max_steps=steps, learning_rate=2e-4 if lora else 1e-5, lr_scheduler_type="linear", warmup_steps=0,
            max_grad_norm=1.0, max_length=job["seq_len"], assistant_only_loss=True, packing=False,
            bf16=cuda, fp16=False, use_cpu=not cuda, optim="adamw_torch_fused" if cuda else "adamw_torch",
            gradient_checkpointing=checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False} if checkpointing else None,
            report_to=[], save_strategy="no", logging_steps=1, dataloader_num_workers=0, seed=42,
            disable_tqdm=True, dataset_num_proc=None)
        peft = LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"],
                          target_modules="all-linear", bias="none", task_type="CAUSAL_LM") if lora else None
        trainer = SFTTrainer(model=model, args=config, train_dataset=Dataset.from_list(rows),
                             processing_class=tokenizer, callbacks=[trl_clock(ends)], peft_config=peft)
        trainer.train()
    return timing(ends, job["warmup"], job["batch"] * job["data_tokens_mean"])
