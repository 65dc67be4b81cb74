"""The batcher's runner: turns queued jobs into rows of the running batch and finished rows into chat completions.

`BatchRunner(generate_lock)` implements `batching.Runner`. `admit` encodes each job not yet encoded (the engine
encodes in the caller's thread; a bad one fails alone), gives
every choice a row with its own seeded uniforms, and prefills them into the running batch (`decoding.RunningBatch`);
`step` decodes one token for every row; a job whose rows have all ended gets its completion at once. `run_alone`
is the path for images and vision models: one `generate` call for the job's rows (`generation.generate`). Every
forward runs under `generate_lock`, which the RL policy server takes to swap weights between steps.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from synth_ai.backend.inference import generation
from synth_ai.backend.inference.batching import Job
from synth_ai.backend.inference.decoding import LiveRow, RunningBatch
from synth_ai.backend.inference.parsing import apply_stop, parse_output


@dataclass
class SampledTokens:
    """One sampled choice, token for token (see `InferenceEngine.chat_completion_with_tokens`)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    temperature: float
    vision_inputs: dict[str, Any] = field(default_factory=dict)  # pixel_values / image_grid_thw (CPU tensors)
    images: int = 0
    finish_reason: str = "stop"
    forced: list[bool] = field(default_factory=list)  # per completion token: forced, not sampled (not trained)
    adapter_version: int | None = None  # the vLLM LoRA adapter version that sampled it (`vllm_lora`); None: none
    versions: list[int] = field(default_factory=list)  # per completion token: the policy version that sampled it


class BatchRunner:
    def __init__(self, generate_lock: threading.Lock) -> None:
        self.lock = generate_lock

    def admit(self, batch: RunningBatch | None, jobs: list[Job]) -> tuple[RunningBatch | None, list[Job]]:
        finished, lives, prompts = [], [], []
        for job in jobs:
            if job.encoded is None:
                try:
                    job.encoded = generation.encode(job.loaded, job.params, job.messages, job.images)
                except Exception as exc:  # noqa: BLE001 - this caller's error, not the batch's
                    job.error = exc
                    finished.append(job)
                    continue
            job.sampled = generation.rows_for(0, job.params)
            job.rows_left = len(job.sampled)
            for row in job.sampled:
                lives.append(LiveRow(row=row, owner=job, uniforms=row_uniforms(row).tolist(), stops=job.params["stop"]))
                prompts.append(job.encoded.prompt_ids)
        if not lives:
            return batch, finished
        if batch is None or not len(batch):
            batch = RunningBatch(lives[0].owner.loaded)
        with self.lock:
            ended = batch.admit(lives, prompts)
        return batch, finished + self._answer(ended)

    def step(self, batch: RunningBatch) -> list[Job]:
        with self.lock:
            ended = batch.step()
        return self._answer(ended)

    def abandon(self, batch: RunningBatch) -> list[Job]:
        return list({id(live.owner): live.owner for live in batch.fail_all()}.values())

    def run_alone(self, job: Job) -> None:
        with self.lock:
            try:
                encoded = job.encoded or generation.encode(job.loaded, job.params, job.messages, job.images)
            except Exception as exc:  # noqa: BLE001 - this caller's error
                job.error = exc
                return
            rows = generation.rows_for(0, job.params)
            generation.generate(job.loaded, [encoded], rows)
        job.result = completion(job, encoded, rows)

    def _answer(self, ended: list[LiveRow]) -> list[Job]:
        done = []
        for live in ended:
            job = live.owner
            job.rows_left -= 1
            if job.rows_left == 0:
                try:
                    job.result = self.result(job)
                except Exception as exc:  # noqa: BLE001 - this caller's error, not the batch's
                    job.error = exc
                done.append(job)
        return done

    def result(self, job: Job) -> Any:
        """A finished job's answer from its sampled rows (a subclass may answer in another shape)."""
        return completion(job, job.encoded, job.sampled)


def row_uniforms(row: generation.Row) -> Any:
    """The row's draws, one per step, from its own generator (the same whatever batch the row decodes in)."""
    import torch

    return torch.rand(row.max_tokens, generator=torch.Generator().manual_seed(row.seed), dtype=torch.float64)


def completion(job: Job, encoded: generation.Encoded, rows: list[generation.Row]) -> tuple[dict[str, Any], list[SampledTokens]]:
    loaded, params = job.loaded, job.params
    choices, completion_tokens, sampled = [], 0, []
    for index, row in enumerate(rows):
        hit_eos = bool(row.tokens) and row.tokens[-1] in loaded.eos_ids
        used = row.tokens[:-1] if hit_eos else row.tokens
        cut, stopped = generation.cut_at_stop(loaded.tokenizer, used, params["stop"])
        if stopped:  # the row ends at the stop string's last token; what followed was not part of the reply
            used, hit_eos = cut, False
        kept = len(used) + (1 if hit_eos else 0)  # the end-of-turn token was sampled too: it trains
        completion_tokens += len(used)
        text = encoded.prefix + loaded.tokenizer.decode(used, skip_special_tokens=True)
        text, stopped_text = apply_stop(text, params["stop"])
        message = parse_output(text, tools_enabled=encoded.tools)
        if message.get("tool_calls"):
            finish = "tool_calls"
        elif hit_eos or stopped or stopped_text:
            finish = "stop"
        else:
            finish = "length"
        choices.append({"index": index, "message": message, "finish_reason": finish, "logprobs": None})
        if job.record:
            sampled.append(SampledTokens(
                prompt_ids=list(encoded.prompt_ids), completion_ids=row.tokens[:kept], logprobs=row.logprobs[:kept],
                forced=row.forced[:kept], versions=row.versions[:kept],
                temperature=params["temperature"],
                vision_inputs={k: v.detach().cpu() for k, v in encoded.inputs.items()
                               if k in ("pixel_values", "image_grid_thw")},
                images=len(job.images), finish_reason=finish))
    prompt_len = len(encoded.prompt_ids)
    return {
        "id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion", "created": int(time.time()),
        "model": params["model"], "choices": choices,
        "usage": {"prompt_tokens": prompt_len, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_len + completion_tokens},
    }, sampled
