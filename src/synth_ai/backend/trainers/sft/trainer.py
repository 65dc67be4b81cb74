"""The SFT trainer: full fine-tune or LoRA on Qwen3 / Qwen3-VL, in a plain PyTorch loop.

`run_sft(spec, workdir=, model_store=, reporter=, should_stop=)` is what a job worker calls. `spec` is the SFT job
payload (reference §2.3: `model`, `hyperparameters`, `metadata.effective_config`) plus `job_id`,
`training_file_path` and optionally `validation_file_path`.

Why a hand-written loop and not `transformers.Trainer`: the work per step is small (tiny models on CPU, or one
GPU), so per-step overhead decides throughput; and the loop must check `should_stop()` between steps, checkpoint
and resume exactly, and report events and metrics in the backend's vocabulary. What it does per optimizer step:

- length-grouped micro-batches (`sft_data.epoch_batches`), padded only to the longest row of the batch;
- loss on assistant tokens only, computed on the selected positions (`token_loss`: the LM head runs only on rows
  whose next token is labelled);
- the loss is summed over the micro-batches of the step and divided by the step's labelled-token count, so
  gradient accumulation gives the same gradient as one big batch;
- AdamW, gradient clipping, linear warmup then linear (default), cosine or constant decay;
- bf16 autocast only on a CUDA GPU that supports it (fp32 on CPU); one torch thread for tiny models on CPU
  unless `OMP_NUM_THREADS` says otherwise.

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

import math
import os
import time
from collections.abc import Callable
from dataclasses import replace as _dataclass_replace
from pathlib import Path
from typing import Any

from synth_ai.backend.trainers import distributed
from synth_ai.backend.trainers.common import PROJECTOR_ALIASES  # noqa: F401 - re-exported
from synth_ai.backend.trainers.common import jsonable as _jsonable
from synth_ai.backend.trainers.common import save_final as _save_final
from synth_ai.backend.trainers.common import wrap_lora as _wrap_lora
from synth_ai.backend.trainers.sft.sft_settings import (  # noqa: F401 - re-exported (rl.settings, routes, tests)
    DEFAULT_LORA_TARGETS,
    FULL_KINDS,
    LORA_KINDS,
    Reporter,
    Settings,
    TrainingCancelled,
    _float,
    _int,
    data_path,
    lr_schedule,
    resolve_settings,
)
from synth_ai.errors import InvalidInputError


# The loop ---------------------------------------------------------------------------------------------------------
def run_sft(spec: dict[str, Any], *, workdir: Path, model_store: Any, reporter: Reporter,
            should_stop: Callable[[], bool]) -> dict[str, Any]:
    settings = resolve_settings(spec)
    dp = distributed.current()
    if not dp.main:  # the other ranks of a torchrun job train silently; rank 0 reports for the job
        reporter = _Silent()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    train_path = data_path(spec, "training_file_path", required=True)
    val_path = data_path(spec, "validation_file_path", required=False)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from synth_ai.backend.ml import loading
    from synth_ai.backend.ml.images import env_flag
    from synth_ai.backend.ml.templates import training_template
    from synth_ai.backend.trainers import checkpoints
    from synth_ai.backend.trainers.sft.data import (Encoder, PixelLoader, collate, data_events, epoch_batches,
                                                    read_examples)

    from synth_ai.backend.trainers.sft import fsdp
    from synth_ai.backend.trainers.common import load_policy, vision_base_folder
    from synth_ai.backend.trainers.sft.token_loss import SelectedTokenLoss

    model_path = model_store.resolve(settings.base_model)  # a base model, or a fine-tune of this backend
    base_path = vision_base_folder(model_store, model_path)
    tiny = loading.is_tiny_folder(base_path)
    threads = loading.configure_threads(tiny=tiny)
    vision = loading.is_vision_folder(base_path)
    where = loading.placement()
    use_bf16 = where.device == "cuda" and where.dtype == torch.bfloat16 and settings.bf16 is not False
    if settings.bf16 and not use_bf16:
        settings.notes.append("bf16 was requested but no CUDA GPU with bf16 support is present: training in fp32.")

    # Data ----------------------------------------------------------------------------------------------------------
    tokenizer = loading.load_tokenizer(model_path)
    processor = None
    if vision:
        processor = loading.build_processor(tokenizer, loading.load_image_processor(base_path))
        if settings.max_images_per_message is None:
            settings.max_images_per_message = _registry_image_limit(settings.base_model)
        if settings.per_device_batch > 1:
            old = settings.per_device_batch
            settings.gradient_accumulation_steps *= old
            settings.per_device_batch = 1
            _event(reporter, "sft.config.adjusted",
                   f"Qwen3-VL trains one example per micro-batch: per_device_batch {old} -> 1, "
                   f"gradient_accumulation_steps -> {settings.gradient_accumulation_steps} (same effective batch).",
                   {"per_device_batch": 1, "gradient_accumulation_steps": settings.gradient_accumulation_steps})
    allow_remote = env_flag("SYNTH_TRAINING_ALLOW_REMOTE_IMAGES")
    pixels = PixelLoader(processor.image_processor, allow_remote) if processor is not None else None
    template = training_template(vision)

    def encoder() -> Encoder:
        return Encoder(tokenizer, template, processor=processor, sequence_length=settings.sequence_length,
                       max_images_per_message=settings.max_images_per_message, allow_remote_images=allow_remote)

    prep_started = time.perf_counter()
    train_encoder = encoder()
    train = read_examples(train_path, train_encoder, model_id=settings.base_model)
    data_events(reporter, "training", train_encoder.stats, settings)
    if not train:
        raise InvalidInputError(f"{train_path}: no example has an assistant token to learn from.",
                                hint="Each record needs at least one assistant message (within sequence_length).")
    val: list[Any] = []
    if val_path is not None:
        val_encoder = encoder()
        val = read_examples(val_path, val_encoder, model_id=settings.base_model)
        data_events(reporter, "validation", val_encoder.stats, settings)
    prep_s = time.perf_counter() - prep_started

    # Plan ----------------------------------------------------------------------------------------------------------
    # Under torchrun a step takes `accum` micro-batches on each of the `world` ranks (global batch =
    # per_device_batch x accum x world); one process with accum x world gives the same steps.
    batch, accum = settings.per_device_batch, settings.gradient_accumulation_steps
    step_micro = accum * dp.world
    lengths = [e.length for e in train]
    per_epoch = math.ceil(len(train) / batch)
    if settings.total_steps:
        total_steps = settings.total_steps
        total_micro = total_steps * step_micro
    else:
        total_micro = per_epoch * (settings.n_epochs or 1)
        total_steps = math.ceil(total_micro / step_micro)
    micro: list[list[int]] = []
    epoch = 0
    while len(micro) < total_micro:
        micro.extend(epoch_batches(lengths, batch, settings.seed, epoch))
        epoch += 1
    micro = micro[:total_micro]
    warmup_steps = math.ceil(settings.warmup_ratio * total_steps)
    save_every = settings.save_steps or max(1, math.ceil(total_steps / 4))
    log_every = settings.logging_steps or max(1, total_steps // 20)
    eval_every = settings.eval_steps if val else 0

    # Model ---------------------------------------------------------------------------------------------------------
    torch.manual_seed(settings.seed)
    load_dtype = torch.bfloat16 if (use_bf16 and settings.mode == "lora") else torch.float32
    sharded = settings.fsdp if dp.enabled else None
    if settings.fsdp and not sharded:
        _event(reporter, "sft.config.adjusted", "fsdp shards the model over torchrun ranks; this job runs as one "
               "process, which holds the whole model.", {"fsdp": None})
    # a sharded model is loaded on the CPU: fully_shard moves each rank's shards to its GPU, one layer at a time
    model, _, root_base, _ = load_policy(model_store, settings.base_model,
                                         loading.Placement("cpu" if sharded else where.device, load_dtype))
    if settings.activation_checkpointing:
        # non-reentrant: gradients reach LoRA weights even though the (frozen) inputs need no grad
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if settings.mode == "lora":
        model = _wrap_lora(model, settings, vision)
    model.train()
    n_total = sum(p.numel() for p in model.parameters())
    decoder, lm_head = loading.core_parts(model)
    image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>") if vision else None
    vision_dtype = next(decoder.visual.parameters()).dtype if vision else None
    loss_sum = SelectedTokenLoss(model, decoder, lm_head, bf16=use_bf16, image_pad=image_pad,
                                 vision_dtype=vision_dtype)
    if sharded:
        fsdp.shard(loss_sum, fsdp.decoder_layers(decoder), dp, sharded)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}  # after sharding: its parameters
    n_trainable = sum(p.numel() for p in trainable.values())
    optimizer = torch.optim.AdamW(list(trainable.values()), lr=settings.learning_rate, betas=(0.9, 0.999),
                                  eps=1e-8, weight_decay=settings.weight_decay,
                                  **({"fused": True} if where.device == "cuda" else {"foreach": True}))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_schedule(settings.lr_scheduler, warmup_steps, total_steps))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    start_step, first_loss, history = 0, None, {}
    resume_from = checkpoints.latest(workdir)
    if resume_from is not None:
        saved = checkpoints.load(resume_from)
        if saved["state"].get("fingerprint") != _jsonable(settings.fingerprint()):
            raise InvalidInputError(f"The checkpoint in {resume_from} was written with other settings; "
                                    "refusing to resume from it.",
                                    hint="Delete the job's checkpoints folder to start over.")
        missing = set(trainable) - set(saved["weights"])
        if missing:
            raise InvalidInputError(f"The checkpoint in {resume_from} lacks {len(missing)} trainable tensors.")
        if sharded:
            fsdp.restore(loss_sum, optimizer, trainable, saved["weights"], saved["optimizer"])
        else:
            with torch.no_grad():
                for name, param in trainable.items():
                    param.copy_(saved["weights"][name].to(param.device, param.dtype))
            optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        checkpoints.restore_rng(saved["rng"])
        start_step = int(saved["state"]["step"])
        first_loss = saved["state"].get("train_loss_first")
        history = saved["state"].get("history") or {}
        _event(reporter, "sft.training.resumed", f"Resumed from the checkpoint at step {start_step}.",
               {"step": start_step, "checkpoint": str(resume_from)})

    _event(reporter, "sft.training.started",
           f"Training {settings.base_model} ({settings.mode}) for {total_steps} steps on {len(train)} examples "
           f"({where.device}, {'bf16' if use_bf16 else 'fp32'}).",
           {"model": settings.base_model, "mode": settings.mode, "total_steps": total_steps,
            "start_step": start_step, "n_epochs": settings.n_epochs, "examples": len(train),
            "validation_examples": len(val), "train_tokens": train_encoder.stats.tokens,
            "label_tokens": train_encoder.stats.label_tokens, "per_device_batch": batch,
            "gradient_accumulation_steps": accum, "world_size": dp.world, "learning_rate": settings.learning_rate,
            "warmup_steps": warmup_steps, "lr_scheduler": settings.lr_scheduler,
            "sequence_length": settings.sequence_length, "trainable_params": n_trainable, "total_params": n_total,
            "device": where.device, "dtype": "bf16" if use_bf16 else "fp32", "threads": threads, "fsdp": sharded,
            "vision": vision, "data_prep_s": round(prep_s, 3), "notes": settings.notes,
            **({"lora": {"r": settings.lora_r, "alpha": settings.lora_alpha, "dropout": settings.lora_dropout,
                         "target_modules": settings.lora_targets}} if settings.mode == "lora" else {})})

    def to_device(b: dict[str, Any]) -> dict[str, Any]:
        return {k: (v.to(where.device, non_blocking=True) if hasattr(v, "to") else v) for k, v in b.items()}

    def evaluate() -> tuple[float, int]:
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            order = sorted(range(len(val)), key=lambda i: val[i].length)
            for i in range(0, len(order), batch):
                b = to_device(collate([val[j] for j in order[i:i + batch]], pad_id, pixels))
                total += float(loss_sum(b))
                count += int((b["labels"][:, 1:] != -100).sum())
        model.train()
        return total / max(1, count), count

    best: tuple[float, int] | None = tuple(history["best"]) if history.get("best") else None

    def run_eval(step: int) -> None:
        nonlocal best
        if not dp.main and not sharded:  # a sharded forward needs every rank
            return
        value, count = evaluate()
        if not dp.main:
            return
        reporter.metric("val.loss", step, value, phase="eval")
        if best is None or value < best[0]:
            best = (value, step)
        _event(reporter, "sft.validation.summary", f"step {step}: val.loss {value:.4f} on {len(val)} examples",
               {"step": step, "val_loss": value, "examples": len(val), "label_tokens": count,
                "best_val_loss": best[0], "best_step": best[1]})

    def checkpoint(step: int, last_loss: float | None) -> Path | None:
        weights, optimizer_state = (fsdp.full_tensors(trainable, dp), fsdp.optimizer_state(loss_sum, optimizer)) \
            if sharded else (trainable, None)  # gathering is a collective: every rank takes part
        if not dp.main:
            return None
        state = {"fingerprint": _jsonable(settings.fingerprint()), "train_loss_first": first_loss,
                 "train_loss_last": last_loss, "history": {"best": list(best) if best else None},
                 "total_steps": total_steps}
        return checkpoints.save(workdir, step, trainable=weights, optimizer=optimizer, scheduler=scheduler,
                                state=state, optimizer_state=optimizer_state)

    if eval_every and start_step == 0:
        run_eval(0)
    loop_started = time.perf_counter()
    trained_tokens, last_loss = 0, None
    last_save = last_progress = time.monotonic()
    for step in range(start_step, total_steps):
        if dp.any(should_stop()):
            saved_at = checkpoint(step, last_loss) if step > start_step else resume_from
            _event(reporter, "sft.training.stopped", f"Stopped at step {step} of {total_steps} as asked.",
                   {"step": step, "checkpoint": str(saved_at) if saved_at else None})
            raise TrainingCancelled(step, saved_at)
        t0 = time.perf_counter()
        lr = scheduler.get_last_lr()[0]
        step_items = micro[step * step_micro:(step + 1) * step_micro]
        passes = fsdp.padded(dp.shard(step_items), step_items, dp) if sharded else \
            [(idx, 1.0) for idx in dp.shard(step_items)]
        batches = [(to_device(collate([train[i] for i in idx], pad_id, pixels)), weight) for idx, weight in passes]
        labelled = dp.sum(sum(int((b["labels"][:, 1:] != -100).sum()) for b, w in batches if w))
        step_loss = 0.0
        for b, weight in batches:
            loss = loss_sum(b) / labelled
            if weight != 1.0:  # a pass a sharded rank runs only to keep in step with the others
                loss = loss * weight
            loss.backward()
            step_loss += loss.detach()
        if not sharded:
            dp.sum_grads(list(trainable.values()))
        if settings.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(list(trainable.values()), settings.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        value = dp.sum(float(step_loss))
        elapsed = time.perf_counter() - t0
        tokens = int(dp.sum(sum(b["tokens"] for b, w in batches if w)))
        trained_tokens += tokens
        if first_loss is None:
            first_loss = value
        last_loss = value
        reporter.metric("train.loss", step, value)
        reporter.metric("learning_rate", step, lr)
        reporter.metric("tokens_per_second", step, tokens / max(elapsed, 1e-9))
        done = step + 1
        if done % log_every == 0 or done == total_steps or step == start_step or \
                time.monotonic() - last_progress > 30:
            last_progress = time.monotonic()
            spent = time.perf_counter() - loop_started
            rate = (done - start_step) / max(spent, 1e-9)
            _event(reporter, "sft.progress", f"step {done}/{total_steps} loss {value:.4f}",
                   {"step": done, "total_steps": total_steps, "loss": value, "learning_rate": lr,
                    "epoch": round(min((step + 1) * step_micro, total_micro) / per_epoch, 3),
                    "tokens_per_second": round(trained_tokens / max(spent, 1e-9), 1),
                    "elapsed_s": round(spent, 2), "eta_s": round((total_steps - done) / max(rate, 1e-9), 1)})
        if eval_every and done % eval_every == 0 and done != total_steps:
            run_eval(done)
        if done != total_steps and (done % save_every == 0 or time.monotonic() - last_save > 600):
            path = checkpoint(done, last_loss)
            last_save = time.monotonic()
            _event(reporter, "sft.checkpoint.saved", f"Checkpoint saved at step {done}.",
                   {"step": done, "path": str(path)})
    loop_s = time.perf_counter() - loop_started
    if val:
        run_eval(total_steps)

    # Final model ---------------------------------------------------------------------------------------------------
    final_dir = workdir / "final"
    fine_tuned = f"ft:{root_base}:{settings.job_id}"
    final_model, card = model, settings
    if sharded:  # gathered whole into an unsharded copy of the model on rank 0
        weights = fsdp.full_tensors(trainable, dp)
        if dp.main:
            fresh = load_policy(model_store, settings.base_model, loading.Placement("cpu", load_dtype))[0]
            final_model = fsdp.unsharded_copy(_wrap_lora(fresh, settings, vision) if settings.mode == "lora"
                                              else fresh, weights)
    if not dp.main:  # rank 0 saves and registers the model; the job's result is the same on every rank
        return {"fine_tuned_model": fine_tuned, "steps": total_steps, "rank": dp.rank}
    if root_base != settings.base_model:  # started from a fine-tune: the saved model (merged) names the root base
        final_model = final_model.merge_and_unload() if settings.mode == "lora" else final_model
        card = _dataclass_replace(settings, base_model=root_base, mode="full")
    _save_final(final_model, tokenizer, base_path, final_dir, card, fine_tuned,
                {"steps": total_steps, "train_loss_first": first_loss, "train_loss_final": last_loss})
    model_store.register_fine_tuned(fine_tuned, root_base, settings.job_id, final_dir)
    return {"fine_tuned_model": fine_tuned, "checkpoint_dir": str(final_dir), "steps": total_steps,
            "train_loss_first": first_loss, "train_loss_final": last_loss,
            "val_loss_best": best[0] if best else None, "train_tokens": trained_tokens,
            "train_runtime_s": round(loop_s, 4),
            "tokens_per_second": round(trained_tokens / loop_s, 2) if loop_s > 0 else None,
            "mode": settings.mode}


# Helpers ------------------------------------------------------------------------------------------------------------
def _event(reporter: Reporter, kind: str, message: str, data: dict[str, Any] | None = None,
           level: str = "info") -> None:
    reporter.event(kind, message, data, level=level)


def _registry_image_limit(model_id: str) -> int:
    from synth_ai.models.registry import find_model

    info = find_model(model_id)
    return (info.max_images_per_message if info and info.max_images_per_message else 1)


class _Silent:
    """The reporter of a torchrun rank other than 0."""

    def event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def metric(self, *args: Any, **kwargs: Any) -> None:
        pass
