"""The inference engine behind `POST /api/inference/v1/chat/completions` (OpenAI-compatible, non-streaming).

`InferenceEngine(model_store, max_loaded=2).chat_completion(request)` takes an OpenAI chat request and returns an
OpenAI `chat.completion` object. Supported: text and `image_url` content parts (`data:` URLs; http(s) only with
`SYNTH_INFERENCE_ALLOW_REMOTE_IMAGES=1`), `tools` (rendered into the system turn the way Qwen3 expects),
assistant `tool_calls` and `tool` messages in the history, `<tool_call>` output parsed into `tool_calls`
(`finish_reason: "tool_calls"`), `temperature` (0 = greedy), `top_p`, `top_k`, `max_tokens` /
`max_completion_tokens`, `stop`, `n`, `seed`, `thinking_mode` (`think` | `no_think`), `thinking_budget` (cap on
the tokens inside `<think>`), and `usage`. A prompt as long as the model's context (`max_position_embeddings`) or
longer is a 400 (`details.code: context_length_exceeded`).

Models are base ids, local folders and fine-tuned ids (`ft:...`): a full fine-tune loads as is; a LoRA adapter is
applied to its base and merged once at load. Loaded models stay in an LRU cache of `max_loaded` entries.
Concurrent requests are batched continuously (`synth_ai.backend.inference.batching`): requests join the running
batch between decoding steps and each is answered as soon as its rows end (`decoding`, `runner`), each with its
own sampling settings, limits, stop strings and seed; a full queue is a `RateLimitError` (HTTP 429). `n > 1`
samples the choices as rows of the same batch. Request checks live in `chat_request`.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.backend.inference import generation
from synth_ai.backend.inference.batching import Batcher, Job
from synth_ai.backend.inference.chat_request import MAX_REQUEST_PIXELS, prepare_messages, validate
from synth_ai.backend.inference.prompt_cache import PromptCache
from synth_ai.backend.inference.runner import BatchRunner, SampledTokens
from synth_ai.errors import NotFoundError


@dataclass
class LoadedModel:
    model_id: str
    path: Path
    model: Any
    tokenizer: Any
    template: str
    vision: bool
    processor: Any = None
    eos_ids: list[int] = field(default_factory=list)
    think_open: int | None = None
    think_close: int | None = None
    image_pad: int | None = None
    device: str = "cpu"
    loaded_at: float = field(default_factory=time.time)
    prompts: PromptCache = field(default_factory=PromptCache)  # rendered text prompts (`prompt_cache`)
    policy_version: int = 0  # RL: the trainer's optimiser steps these weights hold; every sampled token is tagged


def describe_model(model_id: str, path: Path, model: Any, tokenizer: Any, *, vision: bool, processor: Any = None,
                   device: str = "cpu") -> LoadedModel:
    """A servable `LoadedModel` for a model already in memory: its chat template, end-of-turn and thinking
    tokens."""
    from synth_ai.backend.ml import loading
    from synth_ai.backend.ml.templates import training_template

    template = _chat_template(tokenizer, path) or training_template(vision)
    eos = [t for t in (loading.special_token_id(tokenizer, "<|im_end|>"),
                       loading.special_token_id(tokenizer, "<|endoftext|>")) if t is not None]
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for token in (configured if isinstance(configured, list) else [configured]):
        if isinstance(token, int) and token not in eos:
            eos.append(token)
    return LoadedModel(
        model_id=model_id, path=path, model=model, tokenizer=tokenizer, template=template, vision=vision,
        processor=processor, eos_ids=eos, think_open=loading.special_token_id(tokenizer, "<think>"),
        think_close=loading.special_token_id(tokenizer, "</think>"),
        image_pad=loading.special_token_id(tokenizer, "<|image_pad|>"), device=device)


class InferenceEngine:
    def __init__(self, model_store: Any, *, max_loaded: int = 2, max_batch: int | None = None,
                 max_queue: int | None = None) -> None:
        if max_loaded < 1:
            raise ValueError("max_loaded must be at least 1")
        self.store = model_store
        self.max_loaded = max_loaded
        self._cache: OrderedDict[str, LoadedModel] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._load_locks: dict[str, threading.Lock] = {}
        self._generate_lock = threading.Lock()
        self._encode_lock = threading.Lock()
        self.batcher = Batcher(BatchRunner(self._generate_lock), max_batch=max_batch, max_queue=max_queue)
        self._pinned: dict[str, LoadedModel] = {}

    # Models -----------------------------------------------------------------------------------------------------
    def list_models(self) -> dict[str, Any]:
        """`GET /v1/models`: every model the store can serve, in OpenAI's list shape."""
        data = []
        for entry in self.store.list_models():
            created = entry.get("created_at")
            data.append({"id": entry["id"], "object": "model", "created": _epoch(created),
                         "owned_by": "synth-ai" if entry.get("kind") == "fine_tuned" else "local",
                         "root": entry.get("base_model"), "kind": entry.get("kind"),
                         "loaded": entry["id"] in self._cache})
        return {"object": "list", "data": data}

    def loaded_models(self) -> list[str]:
        with self._cache_lock:
            return list(self._cache)

    def unload(self, model_id: str | None = None) -> None:
        with self._cache_lock:
            if model_id is None:
                self._cache.clear()
            else:
                self._cache.pop(model_id, None)
        _free_memory()

    def get(self, model_id: str) -> LoadedModel:
        """The loaded model for `model_id`, loading (and evicting the least recently used) when needed."""
        key = model_id.strip()
        with self._cache_lock:
            if key in self._pinned:
                return self._pinned[key]
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            lock = self._load_locks.setdefault(key, threading.Lock())
        with lock:
            with self._cache_lock:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    return self._cache[key]
            try:
                loaded = self._load(key)
            except BaseException:
                with self._cache_lock:  # a failed id keeps no lock: unknown ids must not pile up in memory
                    if self._load_locks.get(key) is lock:
                        del self._load_locks[key]
                raise
            with self._cache_lock:
                self._cache[key] = loaded
                evicted = False
                while len(self._cache) > self.max_loaded:
                    self._cache.popitem(last=False)
                    evicted = True
            if evicted:
                _free_memory()
            return loaded

    def _load(self, model_id: str) -> LoadedModel:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from synth_ai.backend.ml import loading

        path = self.store.resolve(model_id)
        card = loading.read_model_card(path)
        tiny = loading.is_tiny_folder(path)
        base_path = path
        if card.get("kind") == "fine_tuned" and card.get("training_kind") == "lora":
            base_path = self.store.resolve(card["base_model"])
            tiny = loading.is_tiny_folder(base_path)
        loading.configure_threads(tiny=tiny)
        where = loading.placement()
        if base_path != path:
            from peft import PeftModel

            base = loading.load_model(base_path, where)
            with warnings.catch_warnings():  # a deprecation inside peft; nothing for a user to do
                warnings.filterwarnings("ignore", category=FutureWarning)
                model = PeftModel.from_pretrained(base, str(path)).merge_and_unload()
        else:
            model = loading.load_model(path, where)
        model.eval()
        vision = loading.is_vision_folder(base_path)
        tokenizer = loading.load_tokenizer(path)
        processor = None
        if vision:
            source = path if (path / "preprocessor_config.json").exists() else base_path
            processor = loading.build_processor(tokenizer, loading.load_image_processor(source))
        return describe_model(model_id, path, model, tokenizer, vision=vision, processor=processor,
                              device=where.device)

    def pin(self, loaded: LoadedModel) -> None:
        """Serve an in-memory model (e.g. the RL trainer's live policy) under `loaded.model_id`; it is never
        reloaded from disk, and sees every weight update made to it in place."""
        with self._cache_lock:
            self._pinned[loaded.model_id] = loaded

    # Chat completions -------------------------------------------------------------------------------------------
    def chat_completion(self, request: dict[str, Any]) -> dict[str, Any]:
        return self._chat(request, record=False)[0]

    def chat_completion_with_tokens(self, request: dict[str, Any]) -> tuple[dict[str, Any], list[SampledTokens]]:
        """The completion and, per choice, exactly what was sampled: prompt token ids (and image tensors),
        completion token ids (the end-of-turn token included when it was sampled) and each token's log-prob
        under the sampling distribution (temperature, top-p and top-k applied). RL trains on these, never on
        re-tokenised text."""
        return self._chat(request, record=True)

    def _chat(self, request: dict[str, Any], *, record: bool) -> tuple[dict[str, Any], list[SampledTokens]]:
        params = validate(request)
        loaded = self.get(params["model"])
        messages, images = prepare_messages(params["messages"], loaded)
        job = Job(loaded, params, messages, images, record)
        # rendered and tokenised here, in the caller's thread, not in the generation thread between two steps; one
        # at a time (a fast tokenizer used from two threads at once can fail with "Already borrowed")
        key = loaded.prompts.key(loaded, params, messages, images)
        job.encoded = loaded.prompts.get(key)
        if job.encoded is None:
            with self._encode_lock:
                job.encoded = generation.encode(loaded, params, messages, images)
            loaded.prompts.put(key, job.encoded)
        return self.batcher.submit(job)


# Helpers ------------------------------------------------------------------------------------------------------------
def _chat_template(tokenizer: Any, path: Path) -> str | None:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and template:
        return template
    for name in ("chat_template.jinja", "chat_template.json"):
        file = Path(path) / name
        if file.exists():
            text = file.read_text()
            if name.endswith(".json"):
                import json

                text = json.loads(text).get("chat_template", "")
            if text:
                return text
    return None


def _free_memory() -> None:
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover
        pass


def _epoch(stamp: Any) -> int:
    if not stamp:
        return 0
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


__all__ = ["MAX_REQUEST_PIXELS", "InferenceEngine", "LoadedModel", "NotFoundError", "SampledTokens", "describe_model"]
