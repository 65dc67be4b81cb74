"""`POST /api/imports {"path": folder, "name"?, "base"?}`: a Hugging Face folder or a PEFT adapter on this
backend's machine registered as `imported:<base>:<name>` (`backend.store.model_import`), a model jobs can start
from."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request

from synth_ai.backend.api.state import get_backend
from synth_ai.backend.http_errors import ApiError, bad_request
from synth_ai.errors import NotFoundError, SynthError

router = APIRouter(tags=["models"])


@router.post("/imports", status_code=201)
def import_model(request: Request, body: Any = Body(...)) -> dict[str, Any]:
    from pathlib import Path

    from synth_ai.backend.store.model_import import import_model as register

    if not isinstance(body, dict) or not isinstance(body.get("path"), str) or not body["path"].strip():
        raise bad_request('The body must be a JSON object naming the folder: {"path": "/abs/folder"}.')
    for key in ("name", "base"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise bad_request(f"{key} must be a string (found {body[key]!r}).")
    try:
        entry = register(get_backend(request).model_store, Path(body["path"].strip()), name=body.get("name"),
                         base=body.get("base"))
    except NotFoundError as exc:
        raise ApiError(404, "folder_not_found", exc.message, hint=exc.hint) from None
    except SynthError as exc:
        raise ApiError(400, "invalid_import", exc.message, hint=exc.hint, details=exc.details) from None
    return {k: v for k, v in entry.items() if k != "path"}


def refuse_mismatched_import(backend: Any, model: Any, field: str) -> None:
    """A job naming `imported:<base>:<name>` where `<name>` was imported on another base: 400 with both ids."""
    from synth_ai.backend.store.model_import import mismatched_import

    if not isinstance(model, str):
        return
    found = mismatched_import(backend.model_store, model)
    if found is not None:
        job_base, real_base = found
        raise ApiError(400, "adapter_base_mismatch",
                       f"{field} is {model!r}, on base {job_base}, but that imported model is built on {real_base}.",
                       hint=f"Use the id `synth-ai models list` shows for it (on {real_base}).",
                       details={"field": field, "job_base": job_base, "model_base": real_base})
