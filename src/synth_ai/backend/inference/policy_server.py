"""The built-in rollout engine: the OpenAI-compatible endpoint a task app calls during RL, recording what it sampled.

The RL loop talks to a `RolloutEngine` (`rollout_engine.py`, every member it uses) only: `start()` gives the
chat-completions URL to hand to task apps, `take_calls(cid)` returns every LLM call made with `?cid=<cid>` on that
URL (prompt ids, sampled ids, their log-probs) and settles the cid: calls that arrive for it later (a timed-out
attempt's task app still running its episode) are answered but not recorded, so nothing is left behind;
`sync_weights()` makes the trainer's latest weights the ones task apps see. A faster engine (vLLM) implements the
same protocol and the trainer does not change. `hold()` (a context manager) / `release()`: calls are taken and
queued but nothing is sampled in between (the RL loop's rollout prefetch, `trainers/rl/prefetch.py`).

Versions (asynchronous GSPO, `[training].max_staleness` > 0): `publish(version)` after every
optimiser step makes the trainer's weights the served ones and tags every token sampled from then on with
`version` (`SampledTokens.versions`, per token). `BuiltinRolloutEngine.publish` calls `sync_weights()` and then moves
the version, so a subclass that overrides only `sync_weights()` (the vLLM engine) publishes versions as it is:
its tokens are tagged with the version current when their call arrived (older, never newer, than the weights that
sampled them: a staleness bound checked on them holds). The vLLM engine tags them itself, under its generate lock,
with the version of the weights that sampled them. The built-in engine tags each token as it is drawn: a
publish copies the weights between two decoding steps, so rows already decoding go on under the new weights (their
KV cache from the old ones) and no row is stopped; a row's tokens may then carry two versions.

`BuiltinRolloutEngine` (formerly `LocalPolicyServer`, still importable under that name) is a small HTTP server on
127.0.0.1 (free port) in the worker process (stdlib threads, one per connection, with `lean_http`'s request parsing),
answering `POST /v1/chat/completions` with the backend's own `InferenceEngine` (same message preparation, chat
template, tool-call parsing, thinking budget and continuous batching as `/api/inference`: concurrent rollouts'
calls decode in one running batch), over the trainer's in-memory policy. `sync_weights` copies weights between two
decoding steps (under the engine's generate lock).
With `weight_sync_interval = 1` it serves the training model itself; otherwise a copy, refreshed on `sync_weights`.
With a `sampling_dtype` other than the trainer's (bf16 for a full fine-tune on a CUDA GPU, decided by
`trainers/rl/engine_choice.sampling_dtype`) it always serves a copy in that dtype, refreshed (cast) on every
`sync_weights` and so on every `publish`, whose version tags move exactly as they do for the shared model.

Reproducibility: a request without `seed` gets one derived from the engine's seed, its cid (less the job's
prefix) and its call number within that cid, so the same config samples the same tokens in every job, whatever
order concurrent rollouts arrive in (each row of a batch draws from its own generator seeded this way; only
float rounding, which can differ with the batch a call lands in, separates two runs).
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import logging
import socket
import sys
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from synth_ai.backend.inference.batching import RETRY_AFTER_S
from synth_ai.backend.inference.engine import InferenceEngine, LoadedModel, SampledTokens
from synth_ai.backend.inference.lean_http import LeanHandler
from synth_ai.backend.inference.rollout_engine import (  # noqa: F401 - RolloutEngine re-exported (its old home)
    EngineHold,
    RecordedCall,
    RolloutEngine,
    VersionedRolloutEngine,
)
from synth_ai.backend.ml.copies import frozen_copy
from synth_ai.errors import InvalidInputError, NotFoundError, RateLimitError

log = logging.getLogger("synth_ai.backend.policy_server")
MAX_BODY_BYTES = 64 * 1024 * 1024


class _NoStore:
    """The policy server serves one pinned model; nothing is resolved from disk."""

    def resolve(self, model_id: str) -> Any:
        raise NotFoundError(f"Model {model_id!r} is not served here; this endpoint serves the policy being trained.")

    def list_models(self) -> list[dict[str, Any]]:
        return []


class BuiltinRolloutEngine:
    """The built-in `RolloutEngine` (see the module doc)."""

    version: int
    images_dropped: int
    bind_host: str
    path_token: str | None
    adapter_versions: dict[int, int] | None = None  # serves the policy's weights, never a separate adapter

    def __init__(self, loaded: LoadedModel, *, seed: int = 0, share_weights: bool = True,
                 max_images: int | None = None, cid_prefix: str = "", sampling_dtype: Any = None,
                 weight_source: Any = None) -> None:
        self.model_id = loaded.model_id
        self.seed = seed
        self.cid_prefix = cid_prefix  # left out of derived seeds: the same config samples alike in every job
        self.trainer_model = loaded.model
        # `weight_source(model)` fills the served model (`loaded`'s, a copy the trainer made) with its weights: a
        # sharded trainer gathers them (trainers/rl/sharded_policy.py); None: copied from `loaded`'s model
        self.weight_source = weight_source
        # a sampling dtype other than the trainer's needs a copy of its own, whatever share_weights says
        self.share_weights = weight_source is None and share_weights and (
            sampling_dtype is None or sampling_dtype == _dtype_of(loaded.model))
        served = loaded if self.share_weights or weight_source is not None else _copy_loaded(loaded, sampling_dtype)
        self.engine = InferenceEngine(_NoStore(), max_loaded=1)
        self.engine.pin(served)
        self.served = served
        self._calls: dict[str, list[RecordedCall]] = defaultdict(list)
        self._settled: set[str] = set()  # cids already taken: late calls for them are not recorded
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.requests = 0
        self.max_images = max_images
        self.images_dropped = 0
        # set before start() when the server is reached through a public tunnel (trainers/rl/policy_exposure.py)
        self.bind_host = "127.0.0.1"
        self.path_token: str | None = None
        self.version = 0  # the policy version being served

    def publish(self, version: int) -> None:
        """The trainer's weights after `version` optimiser steps become the served ones (see the module doc)."""
        self.sync_weights()  # what an engine overrides; the version moves only once its weights are in place
        self.served.policy_version = version
        self.version = version

    @property
    def failure(self) -> BaseException | None:
        return None  # sampling here never leaves the engine unusable: a failed call fails alone

    # RolloutEngine ------------------------------------------------------------------------------------------
    def start(self) -> str:
        if self._server is None:
            handler = _handler_for(self)
            self._server = _PolicyHTTPServer((self.bind_host, 0), handler)
            self._server.daemon_threads = True
            self._thread = threading.Thread(target=self._server.serve_forever, name="policy-server", daemon=True)
            self._thread.start()
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/chat/completions"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.close_connections()  # kept-alive ones outlive serve_forever: late calls would be sampled
            self._server = None

    def sync_weights(self) -> None:
        if self.share_weights:
            return  # the served model is the trained model
        import torch

        with self.engine._generate_lock, torch.no_grad():  # no generation sees half-copied weights
            if self.weight_source is not None:
                self.weight_source(self.served.model)
            else:
                self.served.model.load_state_dict(self.trainer_model.state_dict())

    def stop(self) -> None:
        """`close()`, under the name the engine had before the contract named it (callers outside the loop)."""
        self.close()

    def hold(self) -> EngineHold:
        self.engine.batcher.hold()
        return EngineHold(self.release)

    def release(self) -> None:
        self.engine.batcher.release()

    def take_calls(self, cid: str) -> list[RecordedCall]:
        with self._lock:
            self._settled.add(cid)
            return sorted(self._calls.pop(cid, []), key=lambda c: c.index)

    def drop_all(self) -> None:
        with self._lock:
            self._calls.clear()

    # Serving ------------------------------------------------------------------------------------------------
    def complete(self, body: dict[str, Any], cid: str | None) -> dict[str, Any]:
        request = dict(body)
        request["model"] = self.model_id  # task apps name the model as configured; this server has one policy
        if self.max_images is not None:
            request["messages"], dropped = _keep_last_images(request.get("messages"), self.max_images)
            if dropped:
                with self._lock:
                    self.images_dropped += dropped
        with self._lock:
            record = bool(cid) and cid not in self._settled
            index = len(self._calls[cid]) if record else 0
            if record:  # reserve the slot now: turns of one episode are sequential, so the index is stable
                self._calls[cid].append(RecordedCall(cid, index, request, []))
                slot = self._calls[cid][-1]
        if request.get("seed") is None:
            key = cid.removeprefix(self.cid_prefix) if cid else f"anonymous-{self.requests}"
            request["seed"] = _derived_seed(self.seed, key, index)
        self.requests += 1
        version = self.version  # an engine that does not tag tokens itself: the version when the call arrived
        try:
            completion, samples = self.engine.chat_completion_with_tokens(request)
        except BaseException:
            if record:
                with self._lock:
                    if slot in self._calls.get(cid, []):
                        self._calls[cid].remove(slot)
            raise
        if record:
            for sample in samples:
                if len(sample.versions) != len(sample.completion_ids):
                    sample.versions = [version] * len(sample.completion_ids)
            slot.samples = samples
        completion["model"] = body.get("model") or self.model_id
        return completion


class _PolicyHTTPServer(ThreadingHTTPServer):
    # a whole RL batch of rollouts connects at once: the stdlib's backlog of 5 resets connections beyond it
    request_queue_size = 256

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """End every open connection (its handler thread reads EOF and ends; a call in flight cannot answer)."""
        with self._open_lock:
            open_now = list(self._open)
        for sock in open_now:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by its client

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a connection ended under its handler (a client gone, or stop())
            log.debug("policy server: connection from %s ended: %s", client_address, sys.exc_info()[1])
            return
        super().handle_error(request, client_address)


def _keep_last_images(messages: Any, limit: int) -> tuple[Any, int]:
    """Messages with only the newest `limit` image parts kept (older ones removed); how many were dropped."""
    from synth_ai.backend.ml.images import image_url_of

    if not isinstance(messages, list):
        return messages, 0
    spots = [(i, j) for i, m in enumerate(messages) if isinstance(m, dict) and isinstance(m.get("content"), list)
             for j, part in enumerate(m["content"]) if image_url_of(part) is not None]
    drop = set(spots[:max(0, len(spots) - limit)])
    if not drop:
        return messages, 0
    out = []
    for i, message in enumerate(messages):
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            message = {**message, "content": [p for j, p in enumerate(message["content"]) if (i, j) not in drop]}
        out.append(message)
    return out, len(drop)


def _derived_seed(seed: int, cid: str, index: int) -> int:
    digest = hashlib.sha256(f"{seed}:{cid}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def _copy_loaded(loaded: LoadedModel, dtype: Any = None) -> LoadedModel:
    """The served model as a frozen copy of the trainer's, in `dtype` (None: the trainer's own)."""
    clone = copy.copy(loaded)
    clone.model = frozen_copy(loaded.model, dtype=dtype)
    return clone


def _dtype_of(model: Any) -> Any:
    return next(model.parameters()).dtype


LocalPolicyServer = BuiltinRolloutEngine  # its former name (docs and benches of earlier versions)


def _handler_for(server: BuiltinRolloutEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(LeanHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            log.debug("policy server: " + format, *args)

        def _send(self, status: int, doc: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            self.send_json(status, doc, headers)

        def _route(self) -> str | None:
            """The request's path without the server's path token; None (after a 404) when the token is wrong."""
            path = urlsplit(self.path).path
            if server.path_token is None:
                return path
            _, marker, token, rest = (path.split("/", 3) + ["", "", ""])[:4]
            if marker == "p" and hmac.compare_digest(token.encode(), server.path_token.encode()):
                return "/" + rest
            length = int(self.headers.get("Content-Length") or 0)
            if 0 < length <= MAX_BODY_BYTES:
                self.rfile.read(length)  # drained: closing on unread data would reset the connection
            else:
                self.close_connection = length > 0
            self._send(404, _error("not_found", "No such route."))  # says nothing about the token
            return None

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            route = self._route()
            if route is None:
                return
            path = route.rstrip("/")
            if path.endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": server.model_id, "object": "model"}]})
            elif path in ("", "/health"):
                self._send(200, {"status": "ok", "model": server.model_id})
            else:
                self._send(404, _error("not_found", f"No route {path}"))

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            parts = urlsplit(self.path)
            route = self._route()
            if route is None:
                return
            if not route.rstrip("/").endswith("/chat/completions"):
                self._send(404, _error("not_found", f"No route {route}; use /v1/chat/completions"))
                return
            cid = (parse_qs(parts.query).get("cid") or [None])[0]
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY_BYTES:
                    raise InvalidInputError(f"The request body is over {MAX_BODY_BYTES} bytes.")
                body = json.loads(self.rfile.read(length) or b"null")
                if not isinstance(body, dict):
                    raise InvalidInputError("The body must be a JSON object (an OpenAI chat completion request).")
                self._send(200, server.complete(body, cid))
            except InvalidInputError as exc:
                self._send(400, _error("invalid_request", exc.message))
            except RateLimitError as exc:  # the batching queue is full
                self._send(429, _error("rate_limited", exc.message), {"Retry-After": str(RETRY_AFTER_S)})
            except ValueError as exc:
                self._send(400, _error("invalid_request", f"{type(exc).__name__}: {exc}"))
            except Exception as exc:  # noqa: BLE001 - the task app gets a 500 it can report
                log.exception("policy server failed")
                self._send(500, _error("inference_error", f"{type(exc).__name__}: {exc}"))

    return Handler


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
