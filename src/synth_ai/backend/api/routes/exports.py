"""`/api/exports`: a model of this backend as a folder to download (`backend.store.model_export`).

`POST /api/exports {"model": id, "merge": false}` prepares the export (merging loads the model: it runs in a worker
thread) and answers its manifest: every file with its size and sha256. `GET /api/exports/{id}/files/{path}`
streams one file; it honours `Range: bytes=N-` and `bytes=N-M` (206) so a client resumes a download after a dropped
connection, and sends the file's sha256 in `X-Content-SHA256`. A Range it cannot serve is answered in the API's one
error shape: 400 `invalid_range` (not one `bytes=` range) or 416 `range_not_satisfiable` (past the end; with
`Content-Range: bytes */<size>`).
"""

from __future__ import annotations

import re
from typing import Any

import anyio
from fastapi import APIRouter, Body, Request
from fastapi.responses import FileResponse

from synth_ai.backend.api.state import get_backend
from synth_ai.backend.http_errors import ApiError, bad_request
from synth_ai.errors import NotFoundError, SynthError

router = APIRouter(tags=["models"])


@router.post("/exports")
async def create_export(request: Request, body: Any = Body(...)) -> dict[str, Any]:
    from synth_ai.backend.store.model_export import build_export

    if not isinstance(body, dict) or not isinstance(body.get("model"), str) or not body["model"].strip():
        raise bad_request("The body must be a JSON object naming the model: {\"model\": \"ft:...\"}.")
    merge = body.get("merge", False)
    if not isinstance(merge, bool):
        raise bad_request(f"merge must be true or false (found {merge!r}).")
    store = get_backend(request).model_store
    try:
        return await anyio.to_thread.run_sync(lambda: build_export(store, body["model"].strip(), merge=merge))
    except NotFoundError as exc:
        raise ApiError(404, "model_not_found", exc.message, hint=exc.hint, details=exc.details) from None
    except SynthError as exc:
        raise ApiError(400, exc.code, exc.message, hint=exc.hint) from None


@router.get("/exports/{export_id}/files/{path:path}")
def export_file(request: Request, export_id: str, path: str) -> FileResponse:
    from synth_ai.backend.store.model_export import export_file as find_file

    try:
        file, item = find_file(get_backend(request).model_store, export_id, path)
    except NotFoundError as exc:
        raise ApiError(404, "export_not_found", exc.message, hint=exc.hint) from None
    _check_range(request.headers.get("range"), int(item["size"]))
    return FileResponse(file, media_type="application/octet-stream", headers={"X-Content-SHA256": item["sha256"]})


_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


def _check_range(header: str | None, size: int) -> None:
    """Refuse, as JSON errors, the ranges FileResponse would answer in plain text or with an empty 416."""
    if header is None:
        return
    match = _RANGE.match(header.strip())
    if match is None:
        raise ApiError(400, "invalid_range", f"Range {header!r} is not one byte range.",
                       hint="Send `Range: bytes=<start>-` (or `bytes=<start>-<end>`) to resume a download.",
                       details={"range": header, "size": size})
    start, end = int(match[1]), match[2]
    if start >= size or (end and int(end) < start):
        raise ApiError(416, "range_not_satisfiable", f"Range {header!r} asks for bytes past the end of the file "
                       f"({size} bytes) or an empty span.", hint="Start below the file's size, or download it whole.",
                       details={"range": header, "size": size}, headers={"Content-Range": f"bytes */{size}"})
