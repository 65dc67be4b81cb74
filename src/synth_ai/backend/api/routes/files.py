"""`/api/files` and `/api/learning/files`: streaming uploads, listing, status, deletion."""

from __future__ import annotations

import errno
from typing import Any

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from synth_ai.backend.api.state import Backend, get_backend
from synth_ai.backend.http_errors import ApiError, bad_request, conflict, not_found
from synth_ai.backend.store import idempotency as idem
from synth_ai.backend.store.blobs import MultipartReceiver, ReceivedUpload, UploadError, too_large_message
from synth_ai.backend.store.db import MAX_INTEGER
from synth_ai.backend.store.files import file_json

router = APIRouter(tags=["files"])

FEED_BYTES = 1024 * 1024  # hand the parser ~1 MiB at a time (one thread hop per MiB, not per network read)
MULTIPART_SLACK = 64 * 1024  # room for part headers and boundaries when checking Content-Length


@router.post("/files", status_code=201)
@router.post("/learning/files", status_code=201)
async def upload_file(request: Request) -> JSONResponse:
    backend = get_backend(request)
    limit = backend.settings.max_upload_bytes
    key = idem.check_key(request.headers.get(idem.HEADER))
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + MULTIPART_SLACK:
        raise ApiError(413, "upload_too_large", too_large_message(limit), details={"limit_bytes": limit})
    content_type = request.headers.get("content-type", "")
    try:
        receiver = MultipartReceiver(content_type, backend.settings.tmp_dir, max_bytes=limit)
    except UploadError as exc:
        raise ApiError(exc.status_code, exc.code, str(exc)) from None
    try:
        pending: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            if not chunk:
                continue
            pending.append(chunk)
            size += len(chunk)
            if size >= FEED_BYTES:
                data = b"".join(pending)
                pending.clear()
                size = 0
                await anyio.to_thread.run_sync(receiver.feed, data)
        if pending:
            await anyio.to_thread.run_sync(receiver.feed, b"".join(pending))
        upload = await anyio.to_thread.run_sync(receiver.finish)
    except UploadError as exc:
        raise ApiError(exc.status_code, exc.code, str(exc),
                       details={"limit_bytes": limit} if exc.status_code == 413 else None) from None
    except (ClientDisconnect, anyio.get_cancelled_exc_class()):
        receiver.abort()
        raise
    except OSError as exc:
        receiver.abort()
        if exc.errno == errno.ENOSPC:
            raise ApiError(507, "insufficient_storage",
                           f"The backend's disk is full; the upload was discarded ({backend.settings.data_dir}).",
                           hint="Free space in the data dir (old files: DELETE /api/files/{id}) and upload again.") \
                from None
        raise
    except BaseException:
        receiver.abort()
        raise
    try:
        status, body, headers = await anyio.to_thread.run_sync(_store_upload, backend, upload, key,
                                                               request.url.path)
    finally:
        if upload.temp_path.exists():
            upload.temp_path.unlink(missing_ok=True)
    return JSONResponse(body, status_code=status, headers=headers)


def _store_upload(backend: Backend, upload: ReceivedUpload, key: str | None, path: str
                  ) -> tuple[int, dict[str, Any], dict[str, str]]:
    purpose = (upload.fields.get("purpose") or "").strip()
    if not purpose:
        raise bad_request("The upload has no `purpose` field.", code="missing_purpose",
                          hint="Send the form field purpose=fine-tune along with the file.")
    scope = "POST /files"  # both upload routes share one key space: they are the same operation
    fingerprint = idem.fingerprint_parts(purpose, upload.filename, upload.sha256, str(upload.size))
    with backend.blob_lock:
        with backend.db.tx() as conn:
            if key:
                stored = idem.lookup(conn, key, scope, fingerprint)
                if stored is not None:
                    row = backend.files.get(stored.resource_id) if stored.resource_id else None
                    body = file_json(row) if row is not None else stored.response
                    return stored.status_code, body, {idem.REPLAY_HEADER: "true"}
            backend.blobs.commit(upload.temp_path, upload.sha256)
            file_id = backend.files.insert(conn, upload, purpose)
            if key:
                record_body = {"id": file_id}
                idem.record(conn, key, scope, fingerprint, 201, record_body, file_id)
    row = backend.files.get(file_id)
    if backend.files.needs_validation(row):
        if upload.size <= backend.settings.sync_validate_bytes or backend.files.reuse_validation(file_id):
            backend.files.validate(file_id)
        else:
            backend.files.mark_processing(file_id)
            backend.validation_pool.submit(backend.files.validate, file_id)
    else:
        backend.files.validate(file_id)
    return 201, file_json(backend.files.get(file_id)), {}


@router.get("/files")
@router.get("/learning/files")
def list_files(request: Request, purpose: str | None = None, limit: int = Query(100, ge=1, le=1000),
               offset: int = Query(0, ge=0, le=MAX_INTEGER)) -> dict[str, Any]:
    backend = get_backend(request)
    rows = backend.files.list(purpose=purpose, limit=limit + 1, offset=offset)
    return {"object": "list", "data": [file_json(r) for r in rows[:limit]], "has_more": len(rows) > limit}


@router.get("/files/{file_id}")
@router.get("/learning/files/{file_id}")
def get_file(request: Request, file_id: str) -> dict[str, Any]:
    row = get_backend(request).files.get(file_id)
    if row is None:
        raise not_found("File", file_id, hint="List files with GET /api/files.")
    return file_json(row)


@router.delete("/files/{file_id}")
@router.delete("/learning/files/{file_id}")
def delete_file(request: Request, file_id: str) -> dict[str, Any]:
    backend = get_backend(request)
    with backend.blob_lock:
        with backend.db.tx() as conn:
            row = conn.execute("SELECT * FROM files WHERE id = ?", (file_id,)).fetchone()
            if row is None:
                raise not_found("File", file_id)
            users = conn.execute(
                "SELECT j.id, j.status FROM job_files jf JOIN jobs j ON j.id = jf.job_id "
                "WHERE jf.file_id = ? AND j.status IN ('created', 'queued', 'running')", (file_id,)).fetchall()
            if users:
                raise conflict(f"File '{file_id}' is used by active job(s): "
                               + ", ".join(f"{u['id']} ({u['status']})" for u in users) + ".",
                               code="file_in_use", hint="Cancel the job or wait for it to finish, then delete.")
            last_user = backend.files.delete(conn, row)
        if last_user:
            backend.blobs.delete(row["sha256"])
    return {"id": file_id, "object": "file", "deleted": True}
