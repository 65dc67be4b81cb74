"""Sampling for a Tinker training client's sampling clients, in its worker, with the built-in engine RL samples
with: the continuous batching of `inference.batching.Batcher` over `inference.decoding.RunningBatch`. Sample
requests that arrive together decode together (the cookbook's RL loop sends each of a group's samples as its own
call), each row with its own seed, temperature, top-k / top-p, `max_tokens` and stops, and a request is answered as
soon as its rows end.

Weights: a request samples from the sampler weights it names. Rows of one batch share one set of weights (each
name has its own `LoadedModel`, and the batcher never mixes two), and before every forward the runner has the
client's model hold that batch's weights (`adapter_slots.AdapterSlots`), under the lock the worker's training calls
take too: a sampler sees exactly the weights it saved, whatever the client trains meanwhile.

Stops follow the SDK's `SamplingParams.stop`: absent, the model's end-of-sequence tokens; token ids; strings (the
row ends once its text holds one; a string that is exactly one special token, like "<|im_end|>", is that token's
id); an empty list, only `max_tokens`. The stop token (or the tokens completing a stop string) stays in the returned
tokens, as the SDK's renderers expect. Log-probs are those of the temperature-scaled distribution before top-k /
top-p, as RL's sampler records them (what training computes at temperature 1). `prompt_logprobs`
(`compute_logprobs`) come from the training forward's own scoring (`ClientModel.prompt_logprobs`), so they equal a
`forward` of the same tokens.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from synth_ai.backend.inference import generation
from synth_ai.backend.inference.batching import Batcher, Job
from synth_ai.backend.inference.decoding import LiveRow, RunningBatch
from synth_ai.backend.inference.engine import LoadedModel
from synth_ai.backend.inference.runner import BatchRunner, row_uniforms
from synth_ai.config.tinker_settings import DEFAULT_MAX_TOKENS
from synth_ai.errors import InvalidInputError


@dataclass(eq=False)
class SampleJob(Job):
    """One `asample` request: its prompt ids, stops, and whether it asks for the prompt's log-probs."""

    tokens: list[int] = field(default_factory=list)
    end_ids: frozenset[int] = frozenset()
    stop_texts: list[str] = field(default_factory=list)
    wants_prompt_logprobs: bool = False
    prompt_logprobs: list[float | None] | None = None

    def batchable(self) -> bool:  # prompt log-probs need the whole prompt's forward: such a request runs alone
        return not self.wants_prompt_logprobs


class TinkerSampler:
    """`sample(request)` blocks until the request's rows are sampled (call it from a thread of its own); the runner
    is the engine's."""

    def __init__(self, loaded: LoadedModel, runner: Any) -> None:
        self.base = loaded
        self._by_weights: dict[str, LoadedModel] = {}
        self.batcher = Batcher(runner)  # BuiltinSampleRunner, or vllm_sampling.VllmSampleRunner

    def sample(self, request: dict[str, Any]) -> dict[str, Any]:
        params = request.get("params") or {}
        tokens = [int(t) for t in request["tokens"]]
        limit = generation.context_length(self.base.model)
        max_tokens = int(params.get("max_tokens") or DEFAULT_MAX_TOKENS)
        if limit is not None and len(tokens) >= limit:
            raise InvalidInputError(f"The prompt is {len(tokens)} tokens; the model's context is {limit}.")
        end_ids, stop_texts = self._stops(params.get("stop"))
        row_params = {"n": int(request["num_samples"]), "seed": params.get("seed"), "max_tokens": max_tokens,
                      "temperature": float(params.get("temperature", 1.0)), "top_p": float(params.get("top_p", 1.0)),
                      "top_k": int(params.get("top_k", -1)), "thinking_mode": None, "thinking_budget": None}
        job = SampleJob(loaded=self._loaded(request["weights"]), params=row_params, messages=[], images=[],
                        record=False, tokens=tokens, end_ids=end_ids, stop_texts=stop_texts,
                        wants_prompt_logprobs=bool(request.get("prompt_logprobs")))
        sequences = self.batcher.submit(job)
        return {"sequences": sequences, "prompt_logprobs": job.prompt_logprobs}

    def _loaded(self, weights: str) -> LoadedModel:
        # one LoadedModel per sampler weights: the batcher batches rows of the same one only
        if weights not in self._by_weights:
            self._by_weights[weights] = dataclasses.replace(self.base, model_id=weights)
        return self._by_weights[weights]

    def _stops(self, stop: Any) -> tuple[frozenset[int], list[str]]:
        if stop is None:
            return frozenset(self.base.eos_ids), []
        items = [stop] if isinstance(stop, str) else list(stop)
        ids = {s for s in items if isinstance(s, int)}
        texts = []
        added = self.base.tokenizer.get_added_vocab()  # special tokens never show in decoded text: stop on their ids
        for text in (s for s in items if isinstance(s, str)):
            if text in added:
                ids.add(int(added[text]))
            else:
                texts.append(text)
        return frozenset(ids), texts


class BuiltinSampleRunner(BatchRunner):
    """`batching.Runner` for token prompts on the built-in engine: rows go into a `RunningBatch` as they are, each
    forward with its batch's sampler weights held (`hold`, under the model lock), and a finished request gets its
    sequences (tokens, log-probs, stop reason) instead of a chat completion."""

    def __init__(self, lock: threading.Lock, hold: Callable[[str], None],
                 prompt_logprobs: Callable[[list[int]], list[float | None]]) -> None:
        super().__init__(lock)
        self.hold, self.score = hold, prompt_logprobs

    def admit(self, batch: RunningBatch | None, jobs: list[Job]) -> tuple[RunningBatch, list[Job]]:
        lives, prompts = [], []
        for job in jobs:
            assert isinstance(job, SampleJob)
            job.sampled = generation.rows_for(0, job.params)
            job.rows_left = len(job.sampled)
            for row in job.sampled:
                lives.append(LiveRow(row=row, owner=job, uniforms=row_uniforms(row).tolist(), stops=job.stop_texts,
                                     end_ids=job.end_ids))
                prompts.append(job.tokens)
        if batch is None or not len(batch):
            batch = RunningBatch(jobs[0].loaded)
        with self.lock:
            self.hold(batch.loaded.model_id)
            ended = batch.admit(lives, prompts)
        return batch, self._answer(ended)

    def step(self, batch: RunningBatch) -> list[Job]:
        with self.lock:
            self.hold(batch.loaded.model_id)
            ended = batch.step()
        return self._answer(ended)

    def run_alone(self, job: Job) -> None:
        assert isinstance(job, SampleJob)
        with self.lock:
            self.hold(job.loaded.model_id)
            job.prompt_logprobs = self.score(job.tokens)
        batch, done = self.admit(None, [job])
        while not done:
            done = self.step(batch)

    def result(self, job: Job) -> list[dict[str, Any]]:
        assert isinstance(job, SampleJob)
        return [_sequence(job, row) for row in job.sampled]


def _sequence(job: SampleJob, row: generation.Row) -> dict[str, Any]:
    stopped = bool(row.tokens) and row.tokens[-1] in job.end_ids
    if not stopped and job.stop_texts:
        text = job.loaded.tokenizer.decode(row.tokens, skip_special_tokens=True)
        stopped = any(stop in text for stop in job.stop_texts)
    return {"tokens": list(row.tokens), "logprobs": list(row.logprobs), "stop_reason": "stop" if stopped else "length"}
