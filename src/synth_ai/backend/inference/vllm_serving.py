"""The inference endpoint's engine when the backend runs with SYNTH_AI_INFERENCE_ENGINE=vllm: `/api/inference`
(and so `synth-ai eval`) sampled by vLLM, as RL rollouts are with a `[vllm]` table.

Everything but the sampling is the built-in engine's (`InferenceEngine`: request checks, chat template, tokenising,
tool-call parsing, the model store's ids); the rows are sampled by `vllm_engine`'s runner. One `vllm.LLM` is held
at a time, for one base model: a request for a model on another base replaces it (loading takes seconds). A LoRA
fine-tune (`ft:`/`rl:` whose card says `lora`) is served as an adapter on its base (`vllm_lora`), never merged, so
the base and all its fine-tunes share one engine; each model's requests are sampled in their own `generate`, since
vLLM's CPU build would apply one adapter to a mixed batch. A full fine-tune is a base of its own.

A model vLLM cannot run (an architecture, a head size its CPU attention lacks, an adapter it refuses) is answered
with vLLM's own reason as a 400, found when the model is first requested: the engine is built and samples one
token before the model counts as loaded.
"""

from __future__ import annotations

import gc
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from synth_ai.backend.inference import vllm_lora
from synth_ai.backend.inference.batching import Batcher, Job
from synth_ai.backend.inference.engine import InferenceEngine, LoadedModel, describe_model
from synth_ai.backend.inference.vllm_engine import _VllmRunner, create_llm, vllm
from synth_ai.backend.inference.vllm_options import VllmOptions, llm_kwargs
from synth_ai.errors import InvalidInputError

MIN_SERVED_LORA_RANK = 16  # an engine built for adapters takes ranks up to at least this without a rebuild


@dataclass(frozen=True)
class _Route:
    """Where a model id is sampled: the base folder vLLM loads and the adapter on it (None: the base itself)."""

    base: Path
    rank: int
    adapter: Any = None


class VllmInferenceEngine(InferenceEngine):
    def __init__(self, model_store: Any, *, cpu: bool) -> None:
        super().__init__(model_store)
        self.cpu = cpu
        self._generate_lock = threading.RLock()  # the runner holds it across an engine swap and its generate
        self._llm: Any = None
        self._llm_key: tuple[Path, int] | None = None  # (base folder, max LoRA rank; 0: no adapters)
        self._routes: dict[str, _Route] = {}
        self._adapter_ids: dict[str, int] = {}
        self.batcher = Batcher(_ServingRunner(self))

    def _load(self, model_id: str) -> LoadedModel:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from synth_ai.backend.ml import loading

        path = self.store.resolve(model_id)
        card = loading.read_model_card(path)
        route = _Route(path, 0)
        if card.get("kind") == "fine_tuned" and card.get("training_kind") == "lora":
            config = vllm_lora.read_adapter_config(path)
            refusal = vllm_lora.adapter_refusal(config)
            if refusal:
                raise InvalidInputError(f"vLLM cannot serve {model_id} as a LoRA adapter: {refusal}.",
                                        hint="Serve it with the built-in engine (SYNTH_AI_INFERENCE_ENGINE=builtin), "
                                             "which merges it.")
            ids = self._adapter_ids
            adapter = vllm_lora.adapter_request(model_id, ids.setdefault(model_id, len(ids) + 1), path)
            route = _Route(self.store.resolve(card["base_model"]), int(config.get("r") or 1), adapter)
        with self._generate_lock:
            llm = self.llm_for(route, model_id)
            if route.adapter is not None:
                try:
                    llm.llm_engine.add_lora(route.adapter)
                except Exception as exc:  # noqa: BLE001 - vLLM's reason goes to the caller
                    raise InvalidInputError(f"vLLM cannot load {model_id} as a LoRA adapter: {_reason(exc)}") from None
            self._routes[model_id] = route
        vision = loading.is_vision_folder(route.base)
        tokenizer = loading.load_tokenizer(path)
        processor = None
        if vision:
            source = path if (path / "preprocessor_config.json").exists() else route.base
            processor = loading.build_processor(tokenizer, loading.load_image_processor(source))
        return describe_model(model_id, path, _model_facts(route.base), tokenizer, vision=vision, processor=processor)

    def route(self, model_id: str) -> _Route:
        return self._routes[model_id]

    def llm_for(self, route: _Route, model_id: str) -> Any:
        """The engine that samples `route` (caller holds the generate lock): the one held, or a new one replacing
        it when the base differs or its adapters need a higher rank."""
        rank = vllm_lora.lora_rank_limit(max(route.rank, MIN_SERVED_LORA_RANK)) if route.adapter is not None else 0
        if self._llm_key is not None and self._llm_key[0] == route.base and self._llm_key[1] >= rank:
            return self._llm
        if self._llm_key is not None and self._llm_key[0] == route.base:
            rank = max(rank, self._llm_key[1])
        self._llm, self._llm_key = None, None
        gc.collect()  # one model in memory: the old engine goes before the new one loads
        self._llm = _start_llm(route.base, rank, model_id, cpu=self.cpu)
        self._llm_key = (route.base, rank)
        return self._llm

    def close(self) -> None:
        with self._generate_lock:
            self._llm, self._llm_key = None, None
            gc.collect()


class _ServingRunner(_VllmRunner):
    """`vllm_engine`'s runner over the serving engine's current `vllm.LLM`, one model's jobs per generate."""

    def __init__(self, engine: VllmInferenceEngine) -> None:
        super().__init__(None, engine._generate_lock, lambda: self.adapter)
        self.engine = engine
        self.adapter: Any = None

    def admit(self, batch: Any, jobs: list[Job]) -> tuple[Any, list[Job]]:
        by_model: dict[str, list[Job]] = {}
        for job in jobs:
            by_model.setdefault(job.loaded.model_id, []).append(job)
        for group in by_model.values():
            self._generate_model(group)
        return None, list(jobs)

    def run_alone(self, job: Job) -> None:
        self._generate_model([job])

    def _generate_model(self, jobs: list[Job]) -> None:
        with self.lock:
            try:
                route = self.engine.route(jobs[0].loaded.model_id)
                self.llm = self.engine.llm_for(route, jobs[0].loaded.model_id)
            except Exception as exc:  # noqa: BLE001 - these callers' error (the model no longer loads)
                for job in jobs:
                    job.error = exc
                return
            self.adapter = route.adapter
            try:
                self._generate(jobs)
            finally:  # only the engine holds the LLM between generates: a swap must free it (vLLM's teardown of
                self.llm = None  # a dropped engine resets process-wide state the next one uses)


def _start_llm(base: Path, max_lora_rank: int, model_id: str, *, cpu: bool) -> Any:
    """A `vllm.LLM` for `base` that has sampled one token (so a model vLLM cannot run fails here, with its reason)."""
    # the rollout engine's settings (float32, eager and a bounded KV cache on a CPU), the engine core in this process
    kwargs = llm_kwargs(VllmOptions(), str(base), seed=0, bf16=not cpu, cpu=cpu)
    if max_lora_rank:
        kwargs.update(vllm_lora.lora_llm_kwargs(max_lora_rank))
    llm, reason = None, None
    try:
        llm = create_llm(kwargs)
        llm.generate([{"prompt_token_ids": [0]}], vllm.SamplingParams(max_tokens=1), use_tqdm=False)
    except Exception as exc:  # noqa: BLE001 - vLLM's reason goes to the caller, not a traceback
        reason = _reason(exc)
    if reason is None:
        return llm
    llm = None
    gc.collect()  # the failed engine is torn down now (the exception's frames no longer hold it), not later
    raise InvalidInputError(f"vLLM cannot run {model_id}: {reason}",
                            hint="Serve it with the built-in engine (SYNTH_AI_INFERENCE_ENGINE=builtin).")


def _model_facts(base: Path) -> Any:
    """What the chat pipeline reads of a model (its config, for the context length; its generation config, for
    end-of-turn ids) without loading weights into this process: vLLM holds them."""
    from transformers import AutoConfig, GenerationConfig

    try:
        generation_config = GenerationConfig.from_pretrained(base)
    except OSError:
        generation_config = None
    return SimpleNamespace(config=AutoConfig.from_pretrained(base), generation_config=generation_config)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
