"""The vLLM rollout engine (GPU only; the `vllm` extra): the built-in engine's HTTP surface and call recording
(`LocalPolicyServer`), with sampling done by an in-process `vllm.LLM`.

What stays the built-in engine's: request validation, message preparation, the chat template and tokenisation
(`generation.encode`, so the prompt ids GSPO trains on are the ones this backend renders), tool-call and thinking
parsing of the reply, dynamic batching of concurrent rollouts' calls into one `generate`. What vLLM does: sampling
each row from the prompt token ids with the row's temperature / top-p / top-k / max_tokens / seed, returning every
sampled token's log-prob (processed, i.e. under the sampling distribution). Images go to vLLM as PIL images with
the rendered prompt text; `[vllm].limit_mm_per_prompt` bounds them.

Weights: `sync_weights()` copies the trainer's current weights into vLLM's model in memory (`load_weights`; a LoRA
policy that vLLM can serve as an adapter is sent as one instead, `vllm_lora.PolicyAdapter`, else merged for the
copy and unmerged after), then drops vLLM's prefix cache. Nothing is written to or read
from disk. vLLM runs with V1 multiprocessing off so that its model lives in this process.

Not done: the thinking budget (`thinking_budget`) is not enforced by this engine (max_tokens is).
"""

from __future__ import annotations

import os
from typing import Any

from synth_ai.backend.inference import generation, vllm_lora
from synth_ai.backend.inference.batching import Batcher, Job
from synth_ai.backend.inference.engine import InferenceEngine, LoadedModel
from synth_ai.backend.inference.policy_server import LocalPolicyServer, _NoStore
from synth_ai.backend.inference.runner import completion
from synth_ai.backend.inference.vllm_options import VLLM_INSTALL_HINT, VllmOptions, llm_kwargs
from synth_ai.errors import UnavailableError

try:
    import vllm
except ImportError as exc:  # the module is only imported when the vLLM engine was chosen
    raise UnavailableError("The vLLM rollout engine needs the `vllm` package, which is not installed.",
                           hint=VLLM_INSTALL_HINT) from exc


class _VllmRunner:
    """`batching.Runner` with vLLM as the sampler: every admission is generated whole by vLLM (which batches and
    schedules internally), so there is never a running batch to step."""

    def __init__(self, llm: Any, generate_lock: Any, lora: Any = None) -> None:
        self.llm = llm
        self.lock = generate_lock
        self.lora = lora or (lambda: None)  # the LoRARequest every row of the next generate samples with

    def admit(self, batch: Any, jobs: list[Job]) -> tuple[Any, list[Job]]:
        self._generate(jobs)
        return None, list(jobs)

    def step(self, batch: Any) -> list[Job]:  # pragma: no cover - admit never leaves a batch running
        return []

    def run_alone(self, job: Job) -> None:
        self._generate([job])

    def abandon(self, batch: Any) -> list[Job]:
        return []

    def _generate(self, jobs: list[Job]) -> None:
        with self.lock:
            ready = []
            for job in jobs:
                try:
                    encoded = job.encoded or generation.encode(job.loaded, job.params, job.messages, job.images)
                    ready.append((job, encoded))
                except Exception as exc:  # noqa: BLE001 - this caller's error, not the batch's
                    job.error = exc
            if not ready:
                return
            rows = [row for i, (job, _) in enumerate(ready) for row in generation.rows_for(i, job.params)]
            prompts = [_prompt(job, encoded) for job, encoded in ready]
            lora = self.lora()
            outputs = self.llm.generate([prompts[row.request] for row in rows], [_sampling(row) for row in rows],
                                        use_tqdm=False, lora_request=lora)
            for row, output in zip(rows, outputs):
                sampled = output.outputs[0]
                row.tokens = list(sampled.token_ids)[:row.max_tokens]
                row.logprobs = [float(step[token].logprob) for step, token in zip(sampled.logprobs, row.tokens)]
        for i, (job, encoded) in enumerate(ready):
            try:
                job.result = completion(job, encoded, [row for row in rows if row.request == i])
                for sample in job.result[1]:
                    sample.adapter_version = lora.lora_int_id if lora is not None else None
            except Exception as exc:  # noqa: BLE001 - this caller's error, not the batch's
                job.error = exc


class _VllmInference(InferenceEngine):
    """The backend's inference engine with vLLM as the sampler (see the module doc)."""

    def __init__(self, llm: Any, lora: Any = None) -> None:
        super().__init__(_NoStore(), max_loaded=1)
        self.llm = llm
        self.batcher = Batcher(_VllmRunner(llm, self._generate_lock, lora))


def _prompt(job: Any, encoded: generation.Encoded) -> dict[str, Any]:
    if job.images:
        text = job.loaded.tokenizer.decode(encoded.prompt_ids, skip_special_tokens=False)
        return {"prompt": text, "multi_modal_data": {"image": list(job.images)}}
    return {"prompt_token_ids": list(encoded.prompt_ids)}


def _sampling(row: generation.Row) -> Any:
    return vllm.SamplingParams(n=1, temperature=row.temperature, top_p=row.top_p, top_k=row.top_k or -1,
                               max_tokens=row.max_tokens, seed=row.seed, logprobs=0, detokenize=False,
                               skip_special_tokens=False)


class VllmPolicyServer(LocalPolicyServer):
    def __init__(self, loaded: LoadedModel, options: VllmOptions, *, bf16: bool, cpu: bool = False, seed: int = 0,
                 max_images: int | None = None, cid_prefix: str = "") -> None:
        # share_weights: `loaded` (the trainer's model) is only read for its tokenizer, template and weights
        super().__init__(loaded, seed=seed, share_weights=True, max_images=max_images, cid_prefix=cid_prefix)
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the model in this process: in-memory sync
        lora = vllm_lora.peft_config_of(loaded.model)
        self.adapter_refusal = vllm_lora.adapter_refusal(lora) if lora is not None else None
        as_adapter = lora is not None and self.adapter_refusal is None
        self.llm = vllm.LLM(**llm_kwargs(options, str(loaded.path), seed=seed, bf16=bf16, cpu=cpu),
                            **(vllm_lora.lora_llm_kwargs(int(lora.r)) if as_adapter else {}))
        self.adapter = vllm_lora.PolicyAdapter(self.llm, loaded.model_id) if as_adapter else None
        self.engine = _VllmInference(self.llm, self.adapter.request if self.adapter is not None else None)
        self.engine.pin(loaded)
        self.sync_weights()  # vLLM loaded the base from disk once; the policy may already differ (resume, LoRA)

    def sync_weights(self) -> None:
        model = self.trainer_model
        if self.adapter is not None:  # a new adapter version; the base in vLLM is the trainer's frozen base
            with self.engine._generate_lock:
                self.adapter.publish(model)
            return
        peft = hasattr(model, "merge_adapter") and hasattr(model, "unmerge_adapter")
        with self.engine._generate_lock:
            if peft:  # a LoRA policy is copied merged; the trainer keeps training the adapter
                model.merge_adapter()
            try:
                weights = list(_plain_weights(model, peft))

                def load(target: Any) -> None:
                    target.load_weights(weights)

                if hasattr(self.llm, "apply_model"):
                    self.llm.apply_model(load)
                else:  # older vLLM: the driver worker's model
                    load(self.llm.llm_engine.model_executor.driver_worker.model_runner.model)
            finally:
                if peft:
                    model.unmerge_adapter()
            self.llm.reset_prefix_cache()

    def stop(self) -> None:
        super().stop()
        if self.adapter is not None:
            self.adapter.close()
        self.llm = None
        self.engine.llm = None
        import gc

        gc.collect()


def _plain_weights(model: Any, peft: bool) -> Any:
    """(name, tensor) of the policy as the plain architecture vLLM holds (PEFT's wrapping taken off the names)."""
    for name, tensor in model.state_dict().items():
        if peft:
            if "lora_" in name or "modules_to_save" in name:
                continue
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
        yield name, tensor.detach()
