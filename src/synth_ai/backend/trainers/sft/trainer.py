"""The SFT trainer: full fine-tune or LoRA on Qwen3 / Qwen3-VL, in a plain PyTorch loop.

`run_sft(spec, workdir=, model_store=, reporter=, should_stop=)` is what a job worker calls. `spec` is the job's
`SFTJobSpec` (`synth_ai.config.job_specs`): the stored payload (reference §2.3: `model`, `hyperparameters`,
`metadata.effective_config`), the job id and model, and the local paths of its training and validation files.

Why a hand-written loop and not `transformers.Trainer`: the work per step is small (tiny models on CPU, or one
GPU), so per-step overhead decides throughput; and the loop must check `should_stop()` between steps, checkpoint
and resume exactly, and report events and metrics in the backend's vocabulary. What it does per optimizer step:

- length-grouped micro-batches (`data.epoch_batches`, planned in `plan`), padded only to the longest row of the
  batch;
- loss on assistant tokens only, computed on the selected positions (`token_loss`: the LM head runs only on rows
  whose next token is labelled);
- the loss is summed over the micro-batches of the step and divided by the step's labelled-token count, so
  gradient accumulation gives the same gradient as one big batch (`steps`);
- AdamW, gradient clipping, linear warmup then linear (default), cosine or constant decay (`model_setup`);
- bf16 autocast only on a CUDA GPU that supports it (fp32 on CPU); one torch thread for tiny models on CPU
  unless `OMP_NUM_THREADS` says otherwise (`trainers/runtime.py`, shared with RL).

A run is a sequence of stages, each in its own module: `trainers.runtime` (device, dtype, threads, loading the
policy with LoRA; shared with RL), `inputs` (tokenizer and data), `plan` (the steps), `model_setup` (model, loss,
optimizer), `run_checkpoints` (resume, save), `steps` (the loop), `validation`, `final_model` (save, register,
result); `run_state` holds what they share.

Events: `sft.training.started`, `sft.config.adjusted`, `sft.data.truncated`, `sft.data.images_dropped`,
`sft.data.skipped`, `sft.progress`, `sft.validation.summary`, `sft.checkpoint.saved`, `sft.training.resumed`,
`sft.training.stopped`. Metrics per step: `train.loss`, `learning_rate`, `tokens_per_second`; `val.loss` at
evaluations. A metric's `step` is the number of optimizer updates applied before it was measured: the first
step's loss is reported at step 0, a validation before training at step 0, the final validation at step N.
The job's terminal events (`sft.job.completed` / `failed`) belong to the server.

Settings are read in `sft_settings`. Under torchrun (`synth_ai.backend.trainers.distributed`) every rank runs
this loop on its share of each step's micro-batches; gradients are summed across ranks (`distributed`, or FSDP's
reduce-scatter when the model is sharded: `fsdp`) and only rank 0 reports, checkpoints and saves the final model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from synth_ai.backend.trainers import distributed
from synth_ai.backend.trainers.common import SilentReporter
from synth_ai.backend.trainers.job_context import JobReporter, ModelLocator, StopCheck
from synth_ai.backend.trainers.runtime import choose_runtime
from synth_ai.backend.trainers.sft.final_model import save_final_model
from synth_ai.backend.trainers.sft.inputs import read_training_data
from synth_ai.backend.trainers.sft.model_setup import build_training_model
from synth_ai.backend.trainers.sft.plan import plan_steps
from synth_ai.backend.trainers.sft.run_checkpoints import resume_from_checkpoint
from synth_ai.backend.trainers.sft.run_state import SFTRun
from synth_ai.backend.trainers.sft.sft_settings import (  # noqa: F401 - re-exported (rl_settings, routes, tests)
    DEFAULT_LORA_TARGETS,
    FULL_KINDS,
    LORA_KINDS,
    Reporter,
    TrainingCancelled,
    _float,
    _int,
    data_path,
    resolve_settings,
)
from synth_ai.backend.trainers.sft.steps import train_steps
from synth_ai.backend.trainers.sft.validation import validate
from synth_ai.config.job_specs import SFTJobSpec


def run_sft(spec: SFTJobSpec | Mapping[str, Any], *, workdir: Path, model_store: ModelLocator,
            reporter: JobReporter, should_stop: StopCheck) -> dict[str, Any]:
    """One SFT job, from its typed spec (a flat dict, as benches build it, is read as one)."""
    spec = SFTJobSpec.of(spec)
    settings = resolve_settings(spec)
    dp = distributed.current()
    if not dp.main:  # the other ranks of a torchrun job train silently; rank 0 reports for the job
        reporter = SilentReporter()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    train_path = data_path(spec, "training", required=True)
    val_path = data_path(spec, "validation", required=False)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    runtime = choose_runtime(model_store, settings.base_model, bf16=settings.bf16, notes=settings.notes)
    data = read_training_data(settings, runtime, train_path, val_path, reporter)
    plan = plan_steps(settings, data.train, data.val, dp.world)
    model = build_training_model(settings, runtime, data.tokenizer, plan, dp, model_store, reporter)
    run = SFTRun(settings, dp, reporter, workdir, runtime, data, plan, model)
    resume_from_checkpoint(run)
    _report_started(run)
    if plan.eval_every and run.progress.start_step == 0:
        validate(run, 0)
    trained_tokens, loop_s = train_steps(run, should_stop)
    if data.val:
        validate(run, plan.total_steps)
    return save_final_model(run, model_store, trained_tokens, loop_s)


def _report_started(run: SFTRun) -> None:
    settings, runtime, plan, data = run.settings, run.runtime, run.plan, run.data
    device, dtype = runtime.where.device, runtime.dtype_name
    lora = {"lora": {"r": settings.lora_r, "alpha": settings.lora_alpha, "dropout": settings.lora_dropout,
                     "target_modules": settings.lora_targets}} if settings.mode == "lora" else {}
    run.reporter.event(
        "sft.training.started",
        f"Training {settings.base_model} ({settings.mode}) for {plan.total_steps} steps on {len(data.train)} "
        f"examples ({device}, {dtype}).",
        {"model": settings.base_model, "mode": settings.mode, "total_steps": plan.total_steps,
         "start_step": run.progress.start_step, "n_epochs": settings.n_epochs, "examples": len(data.train),
         "validation_examples": len(data.val), "train_tokens": data.train_stats.tokens,
         "label_tokens": data.train_stats.label_tokens, "per_device_batch": plan.batch,
         "gradient_accumulation_steps": settings.gradient_accumulation_steps, "world_size": run.dp.world,
         "learning_rate": settings.learning_rate, "warmup_steps": plan.warmup_steps,
         "lr_scheduler": settings.lr_scheduler, "sequence_length": settings.sequence_length,
         "trainable_params": run.model.trainable_params, "total_params": run.model.total_params,
         "device": device, "dtype": dtype, "threads": runtime.threads, "fsdp": run.model.sharded,
         "vision": runtime.vision, "data_prep_s": round(data.prep_s, 3), "notes": settings.notes, **lora})
