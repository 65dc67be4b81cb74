"""The Tinker SDK's REST listing (`tinker.RestClient`): training runs, their checkpoints, sessions, and deleting a
checkpoint (docs/tinker.md, "Runs and checkpoints").

A training run is one training client (a row of `tinker_models`, its id the model id `<session>:train:<n>`), and
its checkpoints are the folders its job saved (`store.tinker_checkpoints`), read from disk on every call so a
listing is never out of step with what a load would find. Everything here belongs to the one key holder, so the
SDK's `access_scope` and `project_id` filters change nothing. Checkpoints never expire (a TTL is accepted and
kept nowhere) and are never published (refused: there is nobody else to publish to).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Query, Request, Response

from synth_ai.backend.api.routes.tinker_api import _bad, _body, _model, queue_of, saved_checkpoint
from synth_ai.backend.api.state import Backend, get_backend
from synth_ai.backend.http_errors import ApiError
from synth_ai.backend.store import tinker_checkpoints
from synth_ai.backend.store.db import MAX_INTEGER, loads
from synth_ai.backend.store.tinker_checkpoints import CHECKPOINT_TYPES, SavedCheckpoint
from synth_ai.config.tinker_settings import parse_tinker_path, tinker_path
from synth_ai.errors import InvalidInputError

router = APIRouter(tags=["tinker"])

OWNER = "local"  # the TrainingRun's model_owner: the backend's own key holder, the only one there is
_CHECKPOINT = "/training_runs/{run_id}/checkpoints/{kind}/{name}"


# Training runs ------------------------------------------------------------------------------------------------------
@router.get("/training_runs")
def list_training_runs(request: Request, limit: int = Query(20, ge=1, le=1000),
                       offset: int = Query(0, ge=0, le=MAX_INTEGER)) -> dict[str, Any]:
    backend = get_backend(request)
    rows, total = queue_of(backend).models(limit=limit, offset=offset)
    return {"training_runs": [_training_run(backend, row) for row in rows],
            "cursor": {"offset": offset, "limit": limit, "total_count": total}}


@router.get("/training_runs/{run_id}")
def get_training_run(request: Request, run_id: str) -> dict[str, Any]:
    backend = get_backend(request)
    return _training_run(backend, _model(backend, run_id))


def _training_run(backend: Backend, row: Any) -> dict[str, Any]:
    saved = _saved(backend, row)
    job = backend.jobs.get(row["job_id"])
    metadata = (loads(job["payload"]) or {}).get("user_metadata") if job is not None else None
    return {"training_run_id": row["id"], "base_model": row["base_model"], "model_owner": OWNER, "is_lora": True,
            "lora_rank": row["lora_rank"], "corrupted": False,
            "last_request_time": queue_of(backend).last_request_at(row["id"]) or row["created_at"],
            "last_checkpoint": _newest(row["id"], saved, "weights"),
            "last_sampler_checkpoint": _newest(row["id"], saved, "sampler_weights"),
            "user_metadata": _string_values(metadata)}


def _string_values(metadata: Any) -> dict[str, str] | None:
    # the SDK sends any JSON values but reads the run's metadata back as strings only
    if not isinstance(metadata, dict) or not metadata:
        return None
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in metadata.items()}


# Checkpoints --------------------------------------------------------------------------------------------------------
@router.get("/training_runs/{run_id}/checkpoints")
def list_checkpoints(request: Request, run_id: str) -> dict[str, Any]:
    backend = get_backend(request)
    row = _model(backend, run_id)
    return {"checkpoints": [_checkpoint(row["id"], c) for c in _saved(backend, row)], "cursor": None}


@router.get("/checkpoints")
def list_user_checkpoints(request: Request, limit: int = Query(100, ge=1, le=1000),
                          offset: int = Query(0, ge=0, le=MAX_INTEGER)) -> dict[str, Any]:
    """Every run's checkpoints, newest first."""
    backend = get_backend(request)
    rows, _ = queue_of(backend).models()
    every = sorted(((row["id"], c) for row in rows for c in _saved(backend, row)),
                   key=lambda pair: (pair[1].time, pair[0], pair[1].checkpoint_id), reverse=True)
    return {"checkpoints": [_checkpoint(run_id, c) for run_id, c in every[offset:offset + limit]],
            "cursor": {"offset": offset, "limit": limit, "total_count": len(every)}}


@router.delete(_CHECKPOINT + "/publish")
@router.post(_CHECKPOINT + "/publish")
def publish_checkpoint(request: Request, run_id: str, kind: str, name: str) -> None:
    """publish (POST) and unpublish (DELETE), both refused: nothing here is public, so neither can be done."""
    _, saved = saved_checkpoint(get_backend(request), run_id, kind, name)
    raise ApiError(400, "not_published", "Checkpoints of a local backend are not published: publishing shares a "
                                         "checkpoint with other Tinker accounts, and this backend has only yours.",
                   hint=f"Copy the checkpoint's folder ({saved.folder}) where it is needed, or export the training "
                        "client's model once its session ends (`synth-ai models export`).")


@router.put(_CHECKPOINT + "/ttl", status_code=204)
def set_checkpoint_ttl(request: Request, run_id: str, kind: str, name: str, payload: dict[str, Any]) -> Response:
    """Accepted and kept nowhere: a checkpoint here stays until it is deleted."""
    saved_checkpoint(get_backend(request), run_id, kind, name)
    ttl = _body(payload).get("ttl_seconds")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1):
        raise ApiError(400, "invalid_request", f"ttl_seconds must be a whole number of seconds or null "
                                               f"(found {ttl!r}).")
    return Response(status_code=204)


@router.delete(_CHECKPOINT, status_code=204)
def delete_checkpoint(request: Request, run_id: str, kind: str, name: str) -> Response:
    backend = get_backend(request)
    _, saved = saved_checkpoint(backend, run_id, kind, name)
    backend.model_store.unregister(tinker_path(run_id, kind, name))  # no longer a model of the store
    tinker_checkpoints.delete(saved)
    return Response(status_code=204)


@router.delete("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}")
def delete_malformed_checkpoint(run_id: str, checkpoint_id: str) -> None:
    # reached only by an id that is not <kind>/<name>: the route above takes every one that is
    raise ApiError(400, "invalid_request", f"'{checkpoint_id}' is not a checkpoint id of this backend.",
                   hint=f"Checkpoint ids look like weights/<name> or sampler_weights/<name>; "
                        f"RestClient.list_checkpoints('{run_id}') lists them.")


@router.post("/weights_info")
def weights_info(request: Request, payload: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint was trained as: its base model and LoRA (every linear layer of the decoder, not the
    unembedding: `trainers/common.py`'s all-linear targets)."""
    backend = get_backend(request)
    try:
        owner, kind, name = parse_tinker_path(_body(payload).get("tinker_path"))
    except InvalidInputError as exc:
        raise _bad(exc) from None
    row, _ = saved_checkpoint(backend, owner, kind, name)
    return {"base_model": row["base_model"], "is_lora": True, "lora_rank": row["lora_rank"], "train_mlp": True,
            "train_attn": True, "train_unembed": False}


def _saved(backend: Backend, row: Any) -> list[SavedCheckpoint]:
    return tinker_checkpoints.saved(tinker_checkpoints.checkpoints_root(backend.settings, row["job_id"]))


def _checkpoint(run_id: str, saved: SavedCheckpoint) -> dict[str, Any]:
    return {"checkpoint_id": saved.checkpoint_id, "checkpoint_type": CHECKPOINT_TYPES[saved.kind],
            "time": saved.time, "tinker_path": tinker_path(run_id, saved.kind, saved.name),
            "size_bytes": saved.size_bytes, "public": False, "expires_at": None}


def _newest(run_id: str, saved: list[SavedCheckpoint], kind: str) -> dict[str, Any] | None:
    return next((_checkpoint(run_id, c) for c in saved if c.kind == kind), None)


# Sessions -----------------------------------------------------------------------------------------------------------
@router.get("/sessions")
def list_sessions(request: Request, limit: int = Query(20, ge=1, le=1000),
                  offset: int = Query(0, ge=0, le=MAX_INTEGER)) -> dict[str, Any]:
    return {"sessions": queue_of(get_backend(request)).sessions(limit=limit, offset=offset)}


@router.get("/sessions/{session_id}")
def get_session(request: Request, session_id: str) -> dict[str, Any]:
    queue = queue_of(get_backend(request))
    if queue.session(session_id) is None:
        raise ApiError(404, "not_found", f"Session '{session_id}' is not known to this backend.",
                       hint="RestClient.list_sessions() lists the sessions this backend has.")
    return {"training_run_ids": queue.session_models(session_id), "sampler_ids": queue.session_samplers(session_id)}
