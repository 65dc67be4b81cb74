"""`/api/rl/jobs` and `/api/rl/verify_task_app`.

An invalid create body is answered 400 with what is wrong (`backend/jobs/job_bodies.py`, then the trainer's own
settings check, both through the job-kind registry `backend/jobs/kinds.py`). Without the GSPO trainer package a
valid one is answered 501; with it, the task app is probed with the keys the backend knows
(`backend/api/taskapp_probe.py`: a 400 names the keys tried, masked, and the fix) and the job is stored and queued like
SFT jobs (RL jobs start on create, as the reference's client expects: it never calls /start for RL).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse

from synth_ai.backend.api.routes.imports import refuse_mismatched_import
from synth_ai.backend.api.routes.jobs_common import (
    add_job_routes,
    idempotent_create,
    list_jobs_doc,
    replay,
    require_executor,
)
from synth_ai.backend.api.state import get_backend
from synth_ai.backend.api.taskapp_probe import (
    HEADER_STYLES,
    auth_headers,
    get_answer,
    health_ok,
    require_usable_task_app,
    snippet,
)
from synth_ai.backend.http_errors import ApiError
from synth_ai.backend.jobs.kinds import RL_KIND, job_kind
from synth_ai.backend.store import job_records as J
from synth_ai.backend.store.db import MAX_INTEGER
from synth_ai.env.backend_keys import WITH_JOB, environment_keys, known_environment_keys, register_environment_key
from synth_ai.env.secrets import mask_secret, redact
from synth_ai.taskapp.client import TaskAppClient
from synth_ai.taskapp.failures import TaskAppFailure, TaskAppUnreachable
from synth_ai.urls import join_url

router = APIRouter(tags=["rl"])

MAX_CANDIDATES = 15
VERIFY_TIMEOUT_S = 10.0


RL = job_kind(RL_KIND)


@router.post("/rl/jobs", status_code=201)
def create_rl_job(request: Request, body: Any = Body(...)) -> JSONResponse:
    backend = get_backend(request)
    replayed = replay(backend, request, body, "POST /rl/jobs")
    if replayed is not None:
        return replayed
    data = body.get("data") if isinstance(body, dict) else None
    if isinstance(data, dict):
        refuse_mismatched_import(backend, data.get("model") or data.get("base_model"), "data.model")
    clean = RL.check_body(body)
    spec = RL.spec_of(clean, job_id="validation")  # the checked body names exactly one of model, base_model
    model = spec.model_id
    if not RL.available():
        raise ApiError(501, "rl_not_available",
                       "RL training is not available on this backend yet: the config is valid, but this embedded "
                       "backend cannot run GSPO jobs.",
                       hint="Run RL on the hosted Synth backend (--backend https://agent-learning.onrender.com), or "
                            "use SFT here (synth-ai train --type sft).",
                       details={"model": model})
    _keep_key_out_of_payload(clean, backend.settings.data_dir)
    RL.check_settings(spec)  # step rewards, the judge and its key, trainer_mode ...
    require_executor(backend, RL, spec)
    # Refuse now what the worker would fail on minutes later: no key, every key refused, nothing listening.
    require_usable_task_app(str(spec.task_url), known_environment_keys(backend.settings.data_dir))

    def create(conn) -> tuple[int, dict[str, Any]]:
        job_id = backend.jobs.insert(conn, kind=RL.name, training_type=RL.training_type, model=model,
                                     payload=clean, files=[], prefix=RL.id_prefix)
        backend.jobs.transition(job_id, "queued", only_from={"created"}, conn=conn,
                                event=(J.EV_QUEUED, "Job queued.", None, "info"), message="queued on create")
        return 201, J.job_json(backend.jobs.get(job_id, conn), [])

    response = idempotent_create(backend, request, body, create, "POST /rl/jobs")
    backend.scheduler.wake()
    return response


def _keep_key_out_of_payload(clean: dict[str, Any], data_dir) -> None:
    """An `environment_api_key` sent in the body (top level or in `data`) joins the keys the backend knows and is
    dropped from what is stored: job payloads are readable through `/rl/jobs/{id}/config`."""
    for holder in (clean, clean["data"]):
        key = holder.pop("environment_api_key", None)
        if isinstance(key, str) and key.strip():
            register_environment_key(key.strip(), source=WITH_JOB, data_dir=data_dir)


@router.get("/rl/jobs")
def list_rl_jobs(request: Request, status: str | None = None, limit: int = Query(50, ge=1, le=500),
                 offset: int = Query(0, ge=0, le=MAX_INTEGER)) -> dict[str, Any]:
    return list_jobs_doc(get_backend(request), kind=RL.name, status=status, type_=None, limit=limit, offset=offset)


add_job_routes(router, "/rl/jobs", RL.name)


# verify_task_app ------------------------------------------------------------------------------------------------
@router.post("/rl/verify_task_app")
async def verify_task_app(request: Request, body: Any = Body(...)) -> dict[str, Any]:
    backend = get_backend(request)
    url = body.get("endpoint_base_url") if isinstance(body, dict) else None
    if not isinstance(url, str) or not url.strip().startswith(("http://", "https://")):
        raise ApiError(400, "invalid_request", f"endpoint_base_url must be an http(s) URL (found {url!r}).",
                       hint='Send {"endpoint_base_url": "http://127.0.0.1:8001"}.')
    base = url.strip().rstrip("/")
    keys = environment_keys(backend.settings.data_dir)[:MAX_CANDIDATES]
    attempts: list[dict[str, Any]] = []
    any_ok = False
    # The client follows no redirects: they would carry the keys in X-API-Key to whatever host the task app names.
    async with TaskAppClient(base) as app:
        plans: list[tuple[str, str | None]] = [(style, key) for key in keys for style in HEADER_STYLES] or [
            ("none", None)]
        for style, key in plans:
            headers = auth_headers(style, key, keys) if key else {}
            results = []
            for path in ("/health", "/task_info"):
                attempt: dict[str, Any] = {"path": path, "url": join_url(base, path), "header": style,
                                           "key": mask_secret(key) if key else None}
                answer = await get_answer(app, path, headers, VERIFY_TIMEOUT_S)
                if isinstance(answer, TaskAppFailure):
                    attempt.update({"status": None, "ok": False, "error": redact(answer.reason, keys)})
                    attempts.append(attempt)
                    results.append(False)
                    break
                status, text = answer
                ok = health_ok(status, text) if path == "/health" else status == 200
                attempt.update({"status": status, "ok": ok})
                if not ok:
                    attempt["body"] = snippet(text, keys)
                attempts.append(attempt)
                results.append(ok)
                if not ok:
                    break
            if len(results) == 2 and all(results):
                any_ok = True
                break
            if isinstance(answer, TaskAppUnreachable):
                break  # unreachable: other keys will not help
    doc: dict[str, Any] = {
        "any_ok": any_ok,
        "endpoint_base_url": base,
        "attempts": attempts,
        "candidates_first15": [mask_secret(k) for k in keys],
    }
    if not keys:
        doc["message"] = ("The backend knows no ENVIRONMENT_API_KEY: set it in the backend's environment or register "
                          "it (synth_ai.env.backend_keys.register_environment_key).")
    elif not any_ok:
        doc["message"] = "No key/header combination got 200 from both /health and /task_info."
    return doc
