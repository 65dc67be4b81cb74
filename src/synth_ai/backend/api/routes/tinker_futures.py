"""The Tinker API's sampling calls and its futures: `create_sampling_session`, `asample`, `retrieve_future`.

A sampler is bound to a training client and to the sampler weights it saved (`save_weights_for_sampler`); its
samples run in that client's worker, which swaps the saved LoRA weights in for them. `retrieve_future` waits up to
`LONG_POLL_S` for a request to finish (the SDK polls again at once on `try_again`, and gives up on a poll after 45 s)
and answers its result in the encoding the SDK reads for it: protobuf for forward/backward and sample results,
JSON for the rest, `{"error", "category"}` for a request that failed.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
from fastapi import APIRouter, Request, Response

from synth_ai.backend.api import tinker_wire
from synth_ai.backend.api.routes.tinker_api import _bad, _body, _model, queue_of, saved_checkpoint
from synth_ai.backend.api.state import get_backend
from synth_ai.backend.http_errors import ApiError
from synth_ai.backend.store.tinker_queue import DONE, FAILED, sampler_id_of
from synth_ai.config.tinker_settings import check_sampling_params, parse_tinker_path, tinker_path
from synth_ai.errors import InvalidInputError

router = APIRouter(tags=["tinker"])

LONG_POLL_S = 20.0
POLL_INTERVAL_S = 0.05
_PROTOBUF = "application/x-protobuf"


@router.post("/create_sampling_session")
def create_sampling_session(request: Request, payload: dict[str, Any]) -> dict[str, Any]:
    backend = get_backend(request)
    body = _body(payload)
    path = body.get("model_path")
    if not path:
        raise ApiError(400, "invalid_request", "Sampling a base model without a training client is not supported "
                                               "yet: save sampler weights from a training client and sample those.",
                       hint="training_client.save_weights_and_get_sampling_client()")
    try:
        owner, kind, name = parse_tinker_path(path)
    except InvalidInputError as exc:
        raise _bad(exc) from None
    if kind != "sampler_weights":
        raise ApiError(400, "invalid_request", f"A sampling client takes sampler weights "
                                               f"(tinker://.../sampler_weights/<name>); '{path}' is {kind}.")
    saved_checkpoint(backend, owner, kind, name)
    sampler = sampler_id_of(str(body.get("session_id")), int(body.get("sampling_session_seq_id") or 0))
    queue_of(backend).add_sampler(sampler, owner, name)
    return {"sampling_session_id": sampler, "type": "create_sampling_session"}


@router.get("/samplers/{sampler_id}")
def get_sampler(request: Request, sampler_id: str) -> dict[str, Any]:
    backend = get_backend(request)
    row = queue_of(backend).sampler(sampler_id)
    if row is None:
        raise ApiError(404, "not_found", f"Sampling client '{sampler_id}' is not known to this backend.")
    model = _model(backend, row["model_id"])
    path = tinker_path(row["model_id"], "sampler_weights", row["weights"]) if row["weights"] else None
    return {"sampler_id": sampler_id, "base_model": model["base_model"], "model_path": path}


@router.post("/asample")
def asample(request: Request, payload: dict[str, Any]) -> dict[str, Any]:
    backend = get_backend(request)
    body = _body(payload)
    queue = queue_of(backend)
    sampler = queue.sampler(str(body.get("sampling_session_id") or ""))
    if sampler is None:
        raise ApiError(404, "not_found", f"Sampling client '{body.get('sampling_session_id')}' is not known to "
                                         "this backend.")
    num_samples = body.get("num_samples", 1)
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or not 1 <= num_samples <= 256:
        raise ApiError(400, "invalid_request", f"num_samples must be a whole number from 1 to 256 "
                                               f"(found {num_samples!r}).")
    tokens = []
    for chunk in (body.get("prompt") or {}).get("chunks") or []:
        if chunk.get("type") != "encoded_text":
            raise ApiError(400, "invalid_request", f"The prompt has a {chunk.get('type')} chunk; this backend "
                                                   "samples from token chunks only (no images yet).")
        tokens.extend(int(t) for t in chunk.get("tokens") or [])
    if not tokens:
        raise ApiError(400, "invalid_request", "The prompt has no tokens.")
    try:
        params = check_sampling_params(body.get("sampling_params"))
    except InvalidInputError as exc:
        raise _bad(exc) from None
    work = {"tokens": tokens, "num_samples": num_samples, "params": params,
            "prompt_logprobs": bool(body.get("prompt_logprobs")), "weights": sampler["weights"]}
    request_id = queue.submit(sampler["model_id"], None, "sample", work)
    return {"request_id": request_id, "sample_sequence_ids": [f"{request_id}:{i}" for i in range(num_samples)]}


@router.post("/retrieve_future")
async def retrieve_future(request: Request, payload: dict[str, Any]) -> Any:
    backend = get_backend(request)
    request_id = str(_body(payload).get("request_id") or "")
    queue = queue_of(backend)
    deadline = time.monotonic() + LONG_POLL_S
    while True:
        found = await anyio.to_thread.run_sync(queue.get, request_id)
        if found is None:
            raise ApiError(404, "not_found", f"Future '{request_id}' is not known to this backend.")
        if found.status in (DONE, FAILED) or time.monotonic() >= deadline:
            break
        await anyio.sleep(POLL_INTERVAL_S)
    if found.status == FAILED:
        return {"error": found.error or "the request failed", "category": found.category or "unknown"}
    if found.status != DONE:
        ended = await anyio.to_thread.run_sync(_fail_if_worker_ended, backend, found.model_id)
        if ended:
            return {"error": ended, "category": "server"}
        return {"type": "try_again", "request_id": request_id, "queue_state": "active"}
    if found.op in ("forward", "forward_backward"):
        return Response(tinker_wire.forward_backward_output(found.result), media_type=_PROTOBUF)
    if found.op == "sample":
        return Response(tinker_wire.sample_response(found.result), media_type=_PROTOBUF)
    return found.result


def _fail_if_worker_ended(backend: Any, model_id: str) -> str | None:
    """The reason, when the job that should answer has ended (failed, cancelled, or its session closed): its
    pending requests are failed with it, so no future waits forever."""
    model = queue_of(backend).model(model_id)
    job = backend.jobs.get(model["job_id"]) if model is not None else None
    if job is None or job["status"] not in ("succeeded", "failed", "cancelled"):
        return None
    why = f"The training client's job {job['id']} has ended ({job['status']})"
    why += f": {job['error']}" if job["error"] else "."
    queue_of(backend).fail_pending(model_id, why)
    return why
