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
Concurrent requests are batched (`synth_ai.backend.inference.batching`): one generation thread runs one `generate`
at a time for all waiting compatible requests (`synth_ai.backend.inference.generation`), each with its own
sampling settings, limits, stop strings and seed; a full queue is a `RateLimitError` (HTTP 429). `n > 1` samples
the choices as rows of the same batch.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.backend.inference import generation
from synth_ai.backend.inference.batching import Batcher, Job
from synth_ai.backend.inference.parsing import apply_stop, parse_output
from synth_ai.errors import InvalidInputError, NotFoundError

MAX_N = 16
MAX_STOP = 4
MAX_REQUEST_PIXELS = 64 * 1024 * 1024  # decoded image pixels in one request, all images together
MAX_STOP_CHARS = 1024  # generate's stop-string matcher costs time in proportion to the string's length
DEFAULT_MAX_TOKENS = 256
MAX_TOKENS_CAP = 32768
ROLES = {"system", "user", "assistant", "tool"}


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
        self.batcher = Batcher(self._run_batch, max_batch=max_batch, max_queue=max_queue)
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
        params = _validate(request)
        loaded = self.get(params["model"])
        messages, images = _prepare_messages(params["messages"], loaded)
        return self.batcher.submit(Job(loaded, params, messages, images, record))

    def _run_batch(self, jobs: list[Job]) -> None:
        """The batcher's generation step: encode each job (a bad one fails alone), sample all rows in one
        `generate`, hand each job its own completion."""
        with self._generate_lock:
            ready = []
            for job in jobs:
                try:
                    ready.append((job, generation.encode(job.loaded, job.params, job.messages, job.images)))
                except Exception as exc:  # noqa: BLE001 - this caller's error, not the batch's
                    job.error = exc
            if not ready:
                return
            rows = [row for i, (job, _) in enumerate(ready) for row in generation.rows_for(i, job.params)]
            generation.generate(ready[0][0].loaded, [encoded for _, encoded in ready], rows)
            for i, (job, encoded) in enumerate(ready):
                job.result = _completion(job, encoded, [row for row in rows if row.request == i])


def _completion(job: Job, encoded: generation.Encoded, rows: list[generation.Row]
                ) -> tuple[dict[str, Any], list[SampledTokens]]:
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
                prompt_ids=encoded.prompt_ids, completion_ids=row.tokens[:kept], logprobs=row.logprobs[:kept],
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


# Request validation -------------------------------------------------------------------------------------------------
def _validate(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        raise InvalidInputError("The request body must be a JSON object.")
    model = request.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidInputError("`model` is required (a model id from GET /v1/models).")
    if request.get("stream"):
        raise InvalidInputError("Streaming is not supported by this backend; send `stream: false`.")
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidInputError("`messages` must be a non-empty list of chat messages.")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidInputError(f"messages[{i}] must be an object.")
        if message.get("role") not in ROLES:
            raise InvalidInputError(f"messages[{i}].role must be one of system, user, assistant, tool "
                                    f"(found {message.get('role')!r}).")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise InvalidInputError(f"messages[{i}].content must be a string, a list of parts or null.")
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise InvalidInputError(f"messages[{i}].tool_calls must be a list.")

    def number(name: str, default: float, low: float, high: float) -> float:
        value = request.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low <= value <= high):
            raise InvalidInputError(f"`{name}` must be a number between {low} and {high} (found {value!r}).")
        return float(value)

    def integer(name: str, default: int | None, low: int, high: int) -> int | None:
        value = request.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not (low <= value <= high):
            raise InvalidInputError(f"`{name}` must be an integer between {low} and {high} (found {value!r}).")
        return value

    max_tokens = integer("max_completion_tokens", None, 1, MAX_TOKENS_CAP)
    if max_tokens is None:
        max_tokens = integer("max_tokens", DEFAULT_MAX_TOKENS, 1, MAX_TOKENS_CAP)
    stop = request.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOP:
        stops = list(stop)
    else:
        raise InvalidInputError(f"`stop` must be a string or a list of at most {MAX_STOP} strings.")
    stops = [s for s in stops if s]
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise InvalidInputError(f"Each `stop` string must be at most {MAX_STOP_CHARS} characters "
                                f"(found {max(len(s) for s in stops)}).")
    thinking = request.get("thinking_mode")
    if thinking is not None and thinking not in ("think", "no_think"):
        raise InvalidInputError(f"`thinking_mode` must be 'think' or 'no_think' (found {thinking!r}).")
    tools = request.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise InvalidInputError("`tools` must be a list of function tools.")
        tools = [_normalize_tool(t, i) for i, t in enumerate(tools)] or None
    tool_choice = request.get("tool_choice")
    if isinstance(tool_choice, dict):
        tool_choice = "required"
    seed = request.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise InvalidInputError(f"`seed` must be an integer (found {seed!r}).")
    return {
        "model": model.strip(), "messages": messages, "max_tokens": max_tokens,
        "temperature": number("temperature", 1.0, 0.0, 2.0), "top_p": number("top_p", 1.0, 0.0, 1.0) or 1.0,
        "top_k": integer("top_k", None, 0, 10**6), "n": integer("n", 1, 1, MAX_N), "stop": stops,
        "seed": seed, "thinking_mode": thinking, "thinking_budget": integer("thinking_budget", None, 0, 10**6),
        "tools": tools, "tool_choice": tool_choice or "auto",
    }


def _normalize_tool(tool: Any, index: int) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise InvalidInputError(f"tools[{index}] must be an object.")
    fn = tool.get("function") if tool.get("type", "function") == "function" and "function" in tool else tool
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise InvalidInputError(f"tools[{index}] needs function.name.")
    return {"type": "function", "function": fn}


def _prepare_messages(messages: list[dict[str, Any]], loaded: LoadedModel) -> tuple[list[dict[str, Any]], list[Any]]:
    """Messages the template can render (image parts become placeholders) and the decoded images, in order."""
    import json

    from synth_ai.backend.ml.images import env_flag, image_url_of, load_image

    allow_remote = env_flag("SYNTH_INFERENCE_ALLOW_REMOTE_IMAGES")
    images: list[Any] = []
    pixels_left = MAX_REQUEST_PIXELS
    out = []
    for i, message in enumerate(messages):
        message = dict(message)
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if isinstance(part, str):
                    parts.append({"type": "text", "text": part})
                    continue
                url = image_url_of(part)
                if url is None:
                    if not isinstance(part, dict) or (part.get("type") not in (None, "text")) or \
                            not isinstance(part.get("text"), str):
                        raise InvalidInputError(f"messages[{i}].content[{j}] must be a text or image_url part.")
                    parts.append({"type": "text", "text": part["text"]})
                    continue
                if not loaded.vision:
                    raise InvalidInputError(f"messages[{i}] has an image, but {loaded.model_id} accepts text only.",
                                            hint="Use a Qwen3-VL model (e.g. synth-ai/tiny-qwen3-vl) for images.")
                image = load_image(url, allow_remote=allow_remote, where=f"messages[{i}].content[{j}]",
                                   max_pixels=pixels_left)
                pixels_left -= image.size[0] * image.size[1]
                images.append(image)
                parts.append({"type": "image"})
            message["content"] = parts if loaded.vision else "".join(p["text"] for p in parts)
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                fn = call.get("function", call) if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise InvalidInputError(f"messages[{i}].tool_calls entries need function.name.")
                arguments = fn.get("arguments", {})
                if isinstance(arguments, str):
                    try:
                        arguments = json.loads(arguments) if arguments.strip() else {}
                    except ValueError:
                        pass  # rendered verbatim
                calls.append({**call, "function": {"name": fn["name"], "arguments": arguments}})
            message["tool_calls"] = calls
        if message.get("reasoning") and not message.get("reasoning_content"):
            message["reasoning_content"] = message["reasoning"]
        out.append(message)
    return out, images


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


__all__ = ["InferenceEngine", "LoadedModel", "NotFoundError", "SampledTokens", "describe_model"]
