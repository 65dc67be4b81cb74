"""`/api/learning/jobs` (SFT create; every job's reads and controls) and `/api/learning/models`.

`/learning/jobs/{id}` and its sub-routes serve a job of any kind, RL included, as the hosted API's status fallback
does (synth-ai 0.2.17 reads an RL job there when `/rl/jobs/{id}` fails); `/rl/jobs/{id}` serves RL jobs only."""

from __future__ import annotations

import time
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
from synth_ai.backend.api.state import Backend, get_backend
from synth_ai.backend.http_errors import ApiError, not_found
from synth_ai.backend.jobs.job_bodies import RL_TRAINING_MODE, sft_file_ids
from synth_ai.backend.jobs.kinds import SFT_KIND, job_kind
from synth_ai.backend.store import job_records as J
from synth_ai.backend.store.db import MAX_INTEGER
from synth_ai.backend.store.files import DATASET_PURPOSES
from synth_ai.errors import SynthError

router = APIRouter(tags=["learning"])
SFT = job_kind(SFT_KIND)

FILE_READY_WAIT_S = 120.0


def _check_file(backend: Backend, file_id: str, role: str) -> None:
    """Refuse a job whose file is missing, not a dataset, or invalid (waiting for a validation in progress)."""
    label = "Training" if role == "training" else "Validation"
    deadline = time.monotonic() + FILE_READY_WAIT_S
    while True:
        row = backend.files.get(file_id)
        if row is None:
            raise ApiError(400, "file_not_found", f"{label} file '{file_id}' not found on this backend.",
                           hint="Upload it with POST /api/files (purpose=fine-tune) and use the returned id.",
                           details={"file_id": file_id, "role": role})
        if row["status"] not in {"uploaded", "processing"} or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    name = f"{label} file '{file_id}' ({row['filename']})"
    if row["purpose"] not in DATASET_PURPOSES:
        raise ApiError(400, "invalid_file", f"{name} was uploaded with purpose '{row['purpose']}', not fine-tune.",
                       hint="Upload the dataset again with purpose=fine-tune.",
                       details={"file_id": file_id, "role": role, "purpose": row["purpose"]})
    if row["status"] == "invalid":
        from synth_ai.backend.store.db import loads

        errors = loads(row["errors"]) or []
        shown = "; ".join(f"line {e.get('line')}: {e.get('message')}" if e.get("line") else str(e.get("message"))
                          for e in errors[:5])
        more = f" (and {row['error_count'] - 5} more)" if row["error_count"] > 5 else ""
        raise ApiError(400, "invalid_file",
                       f"{name} failed validation with {row['error_count']} error(s): {shown}{more}",
                       hint="Fix the listed lines, upload the file again and create the job with the new id.",
                       details={"file_id": file_id, "filename": row["filename"], "role": role,
                                "errors": errors, "error_count": row["error_count"]})
    if row["status"] != "ready":
        raise ApiError(409, "file_not_ready", f"{name} is still being validated (status {row['status']}).",
                       hint="Retry in a moment; GET /api/files/{id} shows when it is ready.",
                       details={"file_id": file_id, "status": row["status"]})


@router.post("/learning/jobs", status_code=201)
def create_sft_job(request: Request, body: Any = Body(...)) -> JSONResponse:
    backend = get_backend(request)
    replayed = replay(backend, request, body, "POST /learning/jobs")
    if replayed is not None:
        return replayed
    refuse_mismatched_import(backend, body.get("model") if isinstance(body, dict) else None, "model")
    clean = SFT.check_body(body, known_fine_tuned=lambda m: backend.model_store.fine_tuned_entry(m) is not None)
    spec = SFT.spec_of(clean, job_id="validation", model=clean["model"])
    SFT.check_settings(spec)
    require_executor(backend, SFT, spec)
    training, validation = sft_file_ids(clean)
    _check_file(backend, training, "training")
    for file_id in validation:
        _check_file(backend, file_id, "validation")
    clean["training_file_id"] = training
    if validation:
        clean["validation_file_id"] = validation[0]
    files = [(training, "training")] + ([(validation[0], "validation")] if validation else [])

    def create(conn) -> tuple[int, dict[str, Any]]:
        job_id = backend.jobs.insert(conn, kind=SFT.name, training_type=str(clean.get("training_type")
                                                                         or SFT.training_type),
                                     model=clean["model"], payload=clean, files=files, prefix=SFT.id_prefix)
        row = backend.jobs.get(job_id, conn)
        files_rows = conn.execute("SELECT file_id, role FROM job_files WHERE job_id = ?", (job_id,)).fetchall()
        return 201, J.job_json(row, files_rows)

    return idempotent_create(backend, request, body, create, "POST /learning/jobs")


@router.get("/learning/jobs")
def list_sft_jobs(request: Request, status: str | None = None, type: str | None = None,  # noqa: A002
                  limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0, le=MAX_INTEGER)) -> dict[str, Any]:
    # `type` filters by training type or kind: sft_offline, sft, rl_online, rl ... (all jobs live here)
    return list_jobs_doc(get_backend(request), kind=None, status=status, type_=type, limit=limit, offset=offset)


add_job_routes(router, "/learning/jobs", None)  # any kind: see the module docstring


# Models -----------------------------------------------------------------------------------------------------------
def _fine_tuned_from_jobs(backend: Backend) -> dict[str, dict[str, Any]]:
    rows = backend.db.conn().execute(
        "SELECT id, model, fine_tuned_model, finished_at, created_at FROM jobs "
        "WHERE status = 'succeeded' AND fine_tuned_model IS NOT NULL")
    return {r["fine_tuned_model"]: {"id": r["fine_tuned_model"], "base_model": r["model"], "job_id": r["id"],
                                    "created_at": r["finished_at"] or r["created_at"], "status": "ready",
                                    "kind": "fine_tuned"} for r in rows}


def model_docs(backend: Backend) -> list[dict[str, Any]]:
    """Base models usable on this backend and every fine-tuned model, with registry metadata."""
    from synth_ai.models.registry import find_model, resolve_model

    entries: list[dict[str, Any]] = list(backend.model_store.list_models())
    known = {e["id"] for e in entries}
    for model_id, entry in _fine_tuned_from_jobs(backend).items():
        if model_id not in known:
            entries.append(entry)
    docs = []
    for entry in entries:
        doc = {k: v for k, v in entry.items() if k != "path"}
        doc["object"] = "model"
        doc["owned_by"] = "synth-ai-local"
        base_id = entry.get("base_model") or entry["id"]
        info = find_model(base_id)
        if info is None:
            try:
                info = resolve_model(base_id).base
            except SynthError:
                info = None
        if info is not None:
            doc.update({"family": info.family, "modalities": list(info.modalities),
                        "training_modes": list(info.training_modes), "supports_thinking": info.supports_thinking,
                        "supports_vision": info.supports_vision})
        docs.append(doc)
    return docs


@router.get("/learning/models")
@router.get("/models")
def list_models(request: Request, kind: str | None = None) -> dict[str, Any]:
    docs = model_docs(get_backend(request))
    if kind:
        docs = [d for d in docs if d.get("kind") == kind]
    return {"object": "list", "data": docs}


@router.get("/learning/models/rl")
def list_rl_models(request: Request) -> dict[str, Any]:
    docs = [d for d in model_docs(get_backend(request)) if RL_TRAINING_MODE in d.get("training_modes", [])]
    return {"object": "list", "data": docs}


@router.get("/learning/models/{model_id:path}")
@router.get("/models/{model_id:path}")
def get_model(request: Request, model_id: str) -> dict[str, Any]:
    wanted = model_id.strip().lower()
    for doc in model_docs(get_backend(request)):
        if doc["id"].lower() == wanted:
            return doc
    raise not_found("Model", model_id, hint="List the models available here with GET /api/learning/models.")
