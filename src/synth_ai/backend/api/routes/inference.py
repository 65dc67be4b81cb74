"""`/api/inference/v1/chat/completions` and `/api/inference/v1/models`: the OpenAI-compatible endpoint.

`stream: true` answers Server-Sent Events (`synth_ai.backend.inference.streaming`): the engine's completion, in
`chat.completion.chunk` events, then `data: [DONE]`.

The engine (`synth_ai.backend.inference.engine.InferenceEngine`) is created on the first request, so torch is
only imported in the API process when someone asks for inference. Its calls block; they run in a worker thread,
and concurrent ones are batched by the engine. A full batching queue answers 429 with `Retry-After`.
"""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, Body, Request
from fastapi.responses import StreamingResponse

from synth_ai.backend.api.state import get_backend
from synth_ai.backend.http_errors import ApiError
from synth_ai.env.extras import pip_install
from synth_ai.errors import InvalidInputError, NotFoundError, RateLimitError, SynthError, UnavailableError

router = APIRouter(tags=["inference"])


def _api_error(exc: Exception) -> ApiError:
    if isinstance(exc, NotFoundError):
        return ApiError(404, "model_not_found", exc.message, hint=exc.hint)
    if isinstance(exc, InvalidInputError):
        return ApiError(400, "invalid_request", exc.message, hint=exc.hint, details=exc.details)
    if isinstance(exc, RateLimitError):  # the batching queue is full: back-pressure, not an unbounded wait
        from synth_ai.backend.inference.batching import RETRY_AFTER_S

        return ApiError(429, "rate_limited", exc.message, hint=exc.hint, headers={"Retry-After": str(RETRY_AFTER_S)})
    if isinstance(exc, UnavailableError):
        return ApiError(503, "unavailable", exc.message, hint=exc.hint)
    if isinstance(exc, SynthError):
        return ApiError(500, exc.code, exc.message, hint=exc.hint)
    if isinstance(exc, (ValueError, TypeError, KeyError)):
        return ApiError(400, "invalid_request", f"{type(exc).__name__}: {exc}")
    if isinstance(exc, ModuleNotFoundError):
        return ApiError(503, "unavailable", f"Inference needs the training extra ({exc.name} is not installed).",
                        hint=pip_install("train"))
    return ApiError(500, "inference_error", f"{type(exc).__name__}: {exc}")


@router.post("/inference/v1/chat/completions")
async def chat_completions(request: Request, body: Any = Body(...)) -> Any:
    backend = get_backend(request)
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request", "The body must be a JSON object (an OpenAI chat completion request).")
    from synth_ai.backend.inference.streaming import sse_events, stream_settings

    try:
        stream, include_usage = stream_settings(body)
    except ValueError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
    request_body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}

    def call() -> Any:
        return backend.engine().chat_completion(request_body)

    try:
        completion = await anyio.to_thread.run_sync(call)
    except ApiError:
        raise
    except Exception as exc:  # noqa: BLE001 - mapped to a status code
        raise _api_error(exc) from None
    if not stream:
        return completion
    # Errors are known before the first byte (the completion is finished), so they keep their status codes.
    return StreamingResponse(sse_events(completion, include_usage=include_usage), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/inference/v1/models")
def inference_models(request: Request) -> dict[str, Any]:
    try:
        return get_backend(request).engine().list_models()
    except Exception as exc:  # noqa: BLE001 - mapped to a status code
        raise _api_error(exc) from None
