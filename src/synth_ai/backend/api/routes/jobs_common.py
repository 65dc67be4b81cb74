"""Job routes shared by SFT (`/learning/jobs`) and RL (`/rl/jobs`): read, status, events, metrics, timeline,
start and cancel, plus the idempotent-create helper."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse

from synth_ai.backend.api.routes.job_stream import add_stream_route
from synth_ai.backend.api.state import Backend, get_backend
from synth_ai.backend.http_errors import ApiError, conflict, not_found
from synth_ai.backend.jobs.kinds import JobKind, find_kind
from synth_ai.backend.store import idempotency as idem
from synth_ai.backend.store import job_records as J
from synth_ai.backend.store.db import MAX_INTEGER, loads
from synth_ai.config.job_specs import JobSpec

CANCEL_WAIT_EXTRA_S = 5.0


def load_job(backend: Backend, job_id: str, kind: str | None) -> Any:
    row = backend.jobs.get(job_id)
    if row is None or (kind is not None and row["kind"] != kind):
        known = find_kind(kind) if kind is not None else None
        where = known.list_route if known is not None else "GET /api/learning/jobs"
        raise not_found("Job", job_id, hint=f"List jobs with {where}.")
    return row


def job_doc(backend: Backend, row: Any) -> dict[str, Any]:
    return J.job_json(row, backend.jobs.files_of(row["id"]))


def status_doc(backend: Backend, row: Any) -> dict[str, Any]:
    doc = {k: v for k, v in job_doc(backend, row).items()
           if k in {"id", "job_id", "status", "fine_tuned_model", "error", "created_at", "updated_at", "started_at",
                    "finished_at", "cancel_requested", "attempts", "model", "type", "job_type"}}
    last = backend.jobs.last_event(row["id"])
    if last is not None:
        doc["last_event"] = last
    progress = backend.db.conn().execute(
        "SELECT data FROM events WHERE job_id = ? AND type LIKE '%.progress' ORDER BY seq DESC LIMIT 1",
        (row["id"],)).fetchone()
    if progress is not None:
        doc["progress"] = loads(progress["data"]) or {}
    return doc


def replay(backend: Backend, request: Request, body: Any, scope: str) -> JSONResponse | None:
    """The stored answer when this Idempotency-Key was already used for this request (checked before validating,
    so a retry gets the original answer even if, say, its file was deleted since); 409 for a different body."""
    key = idem.check_key(request.headers.get(idem.HEADER))
    if not key:
        return None
    stored = idem.lookup(backend.db.conn(), key, scope, idem.fingerprint_json(body))
    if stored is None or _ended_unsuccessfully(backend, stored) is not None:
        return None  # new, or its job failed or was cancelled: the create runs (and releases the key)
    response = stored.response
    if stored.resource_id:
        row = backend.jobs.get(stored.resource_id)
        if row is not None:
            response = J.job_json(row, backend.jobs.files_of(row["id"]))
    return JSONResponse(response, status_code=stored.status_code, headers={idem.REPLAY_HEADER: "true"})


def idempotent_create(backend: Backend, request: Request, body: Any, create: Callable[[Any], tuple[int, dict]],
                      scope: str) -> JSONResponse:
    """Run `create(conn) -> (status, response)` once per Idempotency-Key (same transaction as the record)."""
    key = idem.check_key(request.headers.get(idem.HEADER))
    fingerprint = idem.fingerprint_json(body)
    superseded = None
    with backend.db.tx() as conn:
        if key:
            stored = idem.lookup(conn, key, scope, fingerprint)
            superseded = _ended_unsuccessfully(backend, stored, conn) if stored is not None else None
            if superseded is not None:
                idem.release(conn, key, scope)
            elif stored is not None:
                response = stored.response
                if stored.resource_id:
                    row = backend.jobs.get(stored.resource_id, conn)
                    if row is not None:
                        response = J.job_json(row, backend.jobs.files_of(row["id"]))
                return JSONResponse(response, status_code=stored.status_code,
                                    headers={idem.REPLAY_HEADER: "true"})
        status, response = create(conn)
        if key:
            idem.record(conn, key, scope, fingerprint, status, {"id": response.get("id")}, response.get("id"))
        if superseded is not None and response.get("id"):  # say which job the key stood for, and why no longer
            backend.jobs._event(conn, response["id"], f"{superseded['kind']}.{J.EV_CREATED}",
                                f"New job for a reused {idem.HEADER}: job {superseded['id']}, made with it earlier, "
                                f"ended {superseded['status']}.", {"supersedes": superseded["id"],
                                                                  "superseded_status": superseded["status"]}, "info")
    headers = {idem.SUPERSEDED_HEADER: f"{superseded['id']}; status={superseded['status']}"} if superseded else {}
    return JSONResponse(response, status_code=status, headers=headers)


def _ended_unsuccessfully(backend: Backend, stored: idem.Stored, conn=None):
    """The job a stored key made, when it has since failed or been cancelled (so the key no longer blocks)."""
    if not stored.resource_id:
        return None
    row = backend.jobs.get(stored.resource_id, conn)
    return row if row is not None and row["status"] in {"failed", "cancelled"} else None


def require_executor(backend: Backend, kind: JobKind, spec: JobSpec) -> None:
    """Refuse now a job that nothing here can run (a 32B model on a CPU-only backend without Modal), or that its
    kind says this machine cannot run (`JobKind.local_check`: RL's vLLM engine)."""
    from synth_ai.backend.executors.modal_plan import plan_for
    from synth_ai.backend.executors.placement import NoExecutorError, choose, job_needs, local_gpu_count
    from synth_ai.errors import InvalidInputError

    needs = job_needs(kind.name, spec.model_id or "", dict(spec.payload))
    try:
        if choose(backend.settings.executor, needs) == "modal":
            plan_for("check", needs)  # a [compute] Modal cannot give (an unknown GPU, 16 per container) is a 400 now
            _require_reachable_task_app(kind, spec)
        else:
            _require_runnable_here(backend, kind, spec, local_gpu_count(), needs.gpu_count)
    except NoExecutorError as exc:
        raise ApiError(400, exc.code, exc.message, hint=exc.hint, details=exc.details) from None
    except InvalidInputError as exc:
        raise ApiError(400, "invalid_compute", exc.message, hint=exc.hint) from None


def _require_runnable_here(backend: Backend, kind: JobKind, spec: JobSpec, gpus: int, gpu_count: int) -> None:
    """The kind's own check of a job that runs on this machine over the ranks the backend's executor would start
    (RL: vLLM installed and able to run the model, FSDP over 2 or more ranks)."""
    from synth_ai.backend.executors.torchrun import torchrun_nproc
    from synth_ai.errors import SynthError

    ranks = torchrun_nproc(kind.gpus_that_train(spec, gpus, gpu_count)) if backend.settings.executor == "torchrun" \
        else 1
    try:
        kind.check_runnable_here(spec, backend.model_store, gpus=gpus, ranks=ranks)
    except SynthError as exc:
        details = dict(exc.details) if isinstance(exc.details, dict) else {}
        code = str(details.pop("code", "cannot_run_here"))
        raise ApiError(400, code, exc.message, hint=exc.hint, details=details or None) from None


def _require_reachable_task_app(kind: JobKind, spec: JobSpec) -> None:
    """A job going to Modal calls its task app (an RL job's) from there: one on this machine's loopback or private
    network would fail every rollout."""
    import os

    from synth_ai.backend.executors.modal_transport import EMULATE_ENV
    from synth_ai.backend.executors.remote_needs import unreachable_reason

    url = spec.task_url
    if not url or os.environ.get(EMULATE_ENV, "").strip():  # an emulated container runs here
        return
    why = unreachable_reason(url)
    if why is not None:
        raise ApiError(400, "task_app_unreachable",
                       f"This {kind.name.upper()} job runs on Modal, and its task app at {url} cannot be reached "
                       f"from there: {why}.",
                       hint="Deploy the task app (`synth-ai deploy <app-id> --name <name>`) and pass its URL with "
                            "--task-url (or [services].task_url), or serve it on a public address.",
                       details={"field": "data.endpoint_base_url", "executor": "modal"})


def start_job(backend: Backend, job_id: str, kind: str) -> dict[str, Any]:
    row = load_job(backend, job_id, kind)
    if row["status"] == "created":
        backend.jobs.transition(job_id, "queued", only_from={"created"},
                                event=(J.EV_QUEUED, "Job queued; it starts when a worker slot is free.", None, "info"),
                                message="start requested")
        backend.scheduler.wake()
    return job_doc(backend, backend.jobs.get(job_id))


def cancel_job(backend: Backend, job_id: str, kind: str) -> dict[str, Any]:
    row = load_job(backend, job_id, kind)
    status = row["status"]
    if status in {"succeeded", "failed"}:
        raise conflict(f"Job '{job_id}' already {status}; it cannot be cancelled.", code="job_finished")
    if status == "cancelled":
        return job_doc(backend, row)
    if status in {"created", "queued"}:
        done = backend.jobs.transition(job_id, "cancelled", only_from={"created", "queued"}, cancel_requested=1,
                                       event=(J.EV_CANCELLED, "Job cancelled before it started.", None, "warning"),
                                       message="cancelled by request")
        if done:
            return job_doc(backend, backend.jobs.get(job_id))
    # running (or it just became running): ask the worker to stop, then wait for it a little
    backend.jobs.request_cancel(job_id)
    backend.scheduler.wake()
    deadline = time.monotonic() + backend.settings.cancel_grace_s + CANCEL_WAIT_EXTRA_S
    while time.monotonic() < deadline:
        row = backend.jobs.get(job_id)
        if row is None or row["status"] in J.TERMINAL:
            break
        time.sleep(0.1)
    return job_doc(backend, backend.jobs.get(job_id))


def add_job_routes(router: APIRouter, prefix: str, kind: str | None) -> None:
    """GET {prefix}/{id}, /status, /events, /events/stream, /metrics, /timeline, /config and POST /start,
    /cancel, for jobs of `kind` (None: any kind; a job of another kind is a 404)."""
    add_stream_route(router, prefix, kind, load_job)

    @router.get(f"{prefix}/{{job_id}}")
    def get_job(request: Request, job_id: str) -> dict[str, Any]:
        backend = get_backend(request)
        return job_doc(backend, load_job(backend, job_id, kind))

    @router.get(f"{prefix}/{{job_id}}/status")
    def get_status(request: Request, job_id: str) -> dict[str, Any]:
        backend = get_backend(request)
        return status_doc(backend, load_job(backend, job_id, kind))

    @router.get(f"{prefix}/{{job_id}}/config")
    def get_config(request: Request, job_id: str) -> dict[str, Any]:
        backend = get_backend(request)
        row = load_job(backend, job_id, kind)
        return {"job_id": job_id, "config": loads(row["payload"]) or {}}

    @router.get(f"{prefix}/{{job_id}}/events")
    def get_events(request: Request, job_id: str, since_seq: int = Query(0, ge=0, le=MAX_INTEGER),
                   limit: int = Query(200, ge=1, le=1000),
                   before_seq: int | None = Query(None, ge=1, le=MAX_INTEGER),
                   order: str = Query("asc", pattern="^(asc|desc)$")) -> dict[str, Any]:
        """Oldest first from `since_seq` (what 0.2.17 asks); `order=desc` gives the newest page first and
        `before_seq` pages back from it. `has_more`: more events match than this page holds."""
        backend = get_backend(request)
        load_job(backend, job_id, kind)
        events = backend.jobs.events(job_id, since_seq=since_seq, limit=limit + 1, before_seq=before_seq,
                                     newest_first=order == "desc")
        page = events[:limit]
        return {"job_id": job_id, "events": page, "next_seq": max((e["seq"] for e in page), default=since_seq),
                "has_more": len(events) > limit}

    @router.get(f"{prefix}/{{job_id}}/metrics")
    def get_metrics(request: Request, job_id: str, after_step: int = Query(-1, ge=-1, le=MAX_INTEGER),
                    limit: int = Query(200, ge=1, le=5000), name: str | None = None) -> dict[str, Any]:
        backend = get_backend(request)
        load_job(backend, job_id, kind)
        return {"job_id": job_id, "points": backend.jobs.metrics(job_id, after_step=after_step, limit=limit,
                                                                 name=name)}

    @router.get(f"{prefix}/{{job_id}}/timeline")
    def get_timeline(request: Request, job_id: str) -> dict[str, Any]:
        backend = get_backend(request)
        load_job(backend, job_id, kind)
        return {"job_id": job_id, "events": backend.jobs.timeline(job_id)}

    @router.post(f"{prefix}/{{job_id}}/start")
    def post_start(request: Request, job_id: str, body: Any = Body(None)) -> JSONResponse:
        backend = get_backend(request)
        key = idem.check_key(request.headers.get(idem.HEADER))
        scope = f"POST {prefix}/{job_id}/start"
        fingerprint = idem.fingerprint_json(body if body is not None else {})
        if key:
            stored = idem.lookup(backend.db.conn(), key, scope, fingerprint)
            if stored is not None:
                doc = job_doc(backend, load_job(backend, job_id, kind))
                return JSONResponse(doc, status_code=stored.status_code, headers={idem.REPLAY_HEADER: "true"})
        doc = start_job(backend, job_id, kind)
        if key:
            with backend.db.tx() as conn:
                if idem.lookup(conn, key, scope, fingerprint) is None:
                    idem.record(conn, key, scope, fingerprint, 200, {"id": job_id}, job_id)
        return JSONResponse(doc, status_code=200)

    @router.post(f"{prefix}/{{job_id}}/cancel")
    def post_cancel(request: Request, job_id: str) -> dict[str, Any]:
        return cancel_job(get_backend(request), job_id, kind)


def list_jobs_doc(backend: Backend, *, kind: str | None, status: str | None, type_: str | None, limit: int,
                  offset: int) -> dict[str, Any]:
    if status:
        known = set(J.STATUSES) | {"canceled"}
        bad = [s for s in status.split(",") if s.strip() and s.strip().lower() not in known]
        if bad:
            raise ApiError(400, "invalid_request", f"Unknown status filter {bad[0]!r}; use one of "
                           f"{', '.join(J.STATUSES)}.")
    rows = backend.jobs.list(kind=kind, status=status, training_type=type_, limit=limit + 1, offset=offset)
    return {"object": "list", "data": [J.job_json(r) for r in rows[:limit]], "has_more": len(rows) > limit}
