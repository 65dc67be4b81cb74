"""The Tinker API (`/api/v1/...`, what the `tinker` 0.38.0 SDK calls): sessions, LoRA training clients, their
training and saving calls, and sampling from their saved weights (docs/tinker.md).

Each training client is a `tinker` job: `create_model` stores and queues it, and its worker (started by the
scheduler like any job) loads the model and runs the client's requests. Every call that does model work is stored
as a pending request (`store.tinker_queue`) and answered with its id at once; the SDK then polls
`retrieve_future` (`routes/tinker_futures.py`). Refusals the API can see (an unknown model, session or loss, a datum
whose tokens and loss inputs disagree) are 400/404s with a message, which the SDK raises as its own errors; never
408/409/429/5xx for bad input, which the SDK retries for minutes.

Auth: `X-API-Key` (the SDK's header) holding one of the backend's keys with the SDK's required `tml-` prefix in
front (`TINKER_API_KEY=tml-$SYNTH_API_KEY`), or a backend key that itself starts with `tml-`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from synth_ai.backend.api import tinker_memory, tinker_wire
from synth_ai.backend.api.state import Backend, get_backend
from synth_ai.backend.http_errors import ApiError
from synth_ai.backend.jobs.kinds import TINKER_KIND, job_kind
from synth_ai.backend.store import job_records as J
from synth_ai.backend.store import tinker_checkpoints
from synth_ai.backend.store.tinker_queue import TinkerQueue
from synth_ai.config.tinker_settings import (
    check_datum,
    check_loss,
    lora_settings,
    parse_tinker_path,
    tinker_path,
)
from synth_ai.errors import InvalidInputError, NotFoundError

router = APIRouter(tags=["tinker"])


def require_tinker_key(request: Request) -> None:
    backend = get_backend(request)
    key = (request.headers.get("x-api-key") or "").strip()
    if not key:
        raise ApiError(401, "unauthorized", "Missing API key: the Tinker SDK sends TINKER_API_KEY as X-API-Key.",
                       hint="export TINKER_API_KEY=tml-$SYNTH_API_KEY (the backend's key with the SDK's prefix).")
    bare = key.removeprefix("tml-")
    if not (backend.keys.check(bare) or backend.keys.check(key)):
        raise ApiError(401, "unauthorized", "Invalid API key for this backend.",
                       hint="TINKER_API_KEY must be tml- followed by one of the keys in "
                            f"{backend.settings.data_dir / 'backend_keys.json'} (your .env's SYNTH_API_KEY).")


def queue_of(backend: Backend) -> TinkerQueue:
    return TinkerQueue(backend.db)


def _body(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise ApiError(400, "invalid_request", "The request body must be a JSON object.")
    return payload


def _bad(exc: InvalidInputError | NotFoundError) -> ApiError:
    status = 404 if isinstance(exc, NotFoundError) else 400
    return ApiError(status, "invalid_request" if status == 400 else "not_found", exc.message, hint=exc.hint)


# Bootstrap and sessions ---------------------------------------------------------------------------------------------
@router.post("/client/config")
def client_config(payload: dict[str, Any] | None = None) -> dict[str, Any]:
    # no JWT exchange (the key is checked on every call); forward_backward chunks one after another, in seq order
    return {"pjwt_auth_enabled": False, "parallel_fwdbwd_chunks": False}


@router.post("/client/dynamic_config")
def dynamic_config(payload: dict[str, Any] | None = None) -> dict[str, Any]:
    return {}


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.post("/telemetry")
def telemetry(payload: dict[str, Any] | None = None) -> dict[str, str]:
    return {"status": "accepted"}  # kept nowhere: the SDK's own usage reports are not this backend's business


@router.post("/create_session")
def create_session(request: Request, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"session_id": queue_of(get_backend(request)).new_session(), "type": "create_session"}


@router.post("/session_heartbeat")
def session_heartbeat(request: Request, payload: dict[str, Any]) -> dict[str, Any]:
    session_id = str(_body(payload).get("session_id") or "")
    if not queue_of(get_backend(request)).heartbeat(session_id):
        raise ApiError(410, "session_finished", f"Session '{session_id}' is finished or unknown.")
    return {"type": "session_heartbeat"}


@router.post("/sessions/{session_id}/finish")
def finish_session(request: Request, session_id: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """The SDK's `ServiceClient.close()`: the session's training clients stop, each saving its adapter as its job's
    model, and their jobs end."""
    backend = get_backend(request)
    if queue_of(backend).session(session_id) is None:
        raise ApiError(404, "not_found", f"Session '{session_id}' is not known to this backend.")
    queue_of(backend).finish_session(session_id)
    backend.scheduler.wake()
    return {}


@router.get("/get_server_capabilities")
def server_capabilities(request: Request) -> dict[str, Any]:
    models = get_backend(request).model_store.list_models()
    return {"supported_models": [{"model_name": m["id"], "trainable": True, "sampleable": True}
                                 for m in models if m.get("kind") == "base"]}


# Training clients ---------------------------------------------------------------------------------------------------
@router.post("/create_model")
def create_model(request: Request, payload: dict[str, Any]) -> dict[str, Any]:
    backend = get_backend(request)
    body = _body(payload)
    queue = queue_of(backend)
    session_id = str(body.get("session_id") or "")
    if queue.session(session_id) is None:
        raise ApiError(404, "not_found", f"Session '{session_id}' is not known to this backend.",
                       hint="Create the training client from a ServiceClient pointed at this backend.")
    base_model = str(body.get("base_model") or "")
    try:
        tokenizer_folder(backend, base_model)
        lora = lora_settings(body.get("lora_config"), body.get("optimizer_config"))
    except (InvalidInputError, NotFoundError) as exc:
        raise _bad(exc) from None
    return _create_client(backend, session_id, body.get("model_seq_id"), base_model, lora,
                          user_metadata=body.get("user_metadata"))


def _create_client(backend: Backend, session_id: str, model_seq_id: Any, base_model: str, lora: dict[str, Any], *,
                   user_metadata: Any = None, load: dict[str, Any] | None = None) -> dict[str, Any]:
    """Store and queue the `tinker` job of a new training client; its seq 0 future (`create_model`, or with `load`
    `create_from_state`) is answered by the worker once the model is loaded."""
    _require_local_worker(backend, base_model)
    model_id = f"{session_id}:train:{int(model_seq_id or 0)}"
    queue = queue_of(backend)
    op = "create_from_state" if load else "create_model"
    if queue.model(model_id) is not None:  # the SDK resent its create: the same model and future
        return {"request_id": queue.submit(model_id, 0, op, load or {}), "model_id": model_id}
    kind = job_kind(TINKER_KIND)
    _require_room(backend, kind.name)
    job_payload = {"model_id": model_id, "session_id": session_id, "base_model": base_model, "lora": lora,
                   "user_metadata": user_metadata or {}, "memory_bytes": _require_memory(backend, base_model, lora)}
    with backend.db.tx() as conn:
        job_id = backend.jobs.insert(conn, kind=kind.name, training_type=kind.training_type, model=base_model,
                                     payload=job_payload, files=[], prefix=kind.id_prefix)
        backend.jobs.transition(job_id, "queued", only_from={"created"}, conn=conn,
                                event=(J.EV_QUEUED, f"Tinker training client {model_id} queued.", None, "info"),
                                message="queued on create")
        queue.add_model(conn, model_id=model_id, session_id=session_id, job_id=job_id, base_model=base_model,
                        lora_rank=lora["rank"])
        request_id = queue.submit(model_id, 0, op, load or {}, conn=conn)
    backend.scheduler.wake()
    return {"request_id": request_id, "model_id": model_id}


def _require_room(backend: Backend, kind: str) -> None:
    """Each training client holds a worker process and a copy of its model: past the backend's limit, refuse."""
    limit = backend.settings.max_interactive_jobs
    live = backend.db.conn().execute("SELECT COUNT(*) FROM jobs WHERE kind = ? AND status IN ('created', 'queued', "
                                     "'running')", (kind,)).fetchone()[0]
    if live >= limit:
        raise ApiError(400, "too_many_training_clients",
                       f"This backend already serves {live} Tinker training clients, its limit "
                       f"(SYNTH_AI_BACKEND_MAX_TINKER_CLIENTS={limit}); each holds a model copy in memory.",
                       hint="Close a client's ServiceClient (close()) or cancel its job (`synth-ai jobs cancel`), "
                            "or restart the backend with a higher SYNTH_AI_BACKEND_MAX_TINKER_CLIENTS if memory "
                            "allows.")


def _require_memory(backend: Backend, base_model: str, lora: dict[str, Any]) -> int | None:
    """The new client's estimated memory (stored with its job), refused when it cannot fit (`tinker_memory`)."""
    from synth_ai.backend.executors.placement import local_gpu_count
    from synth_ai.backend.inference.vllm_options import requested_engine

    on_gpu = local_gpu_count() > 0
    need = tinker_memory.client_bytes(Path(tokenizer_folder(backend, base_model)), lora["rank"], on_gpu=on_gpu,
                                      vllm=requested_engine() == "vllm")
    rows = backend.db.conn().execute("SELECT status, payload FROM jobs WHERE kind = ? AND status IN ('created', "
                                     "'queued', 'running')", (TINKER_KIND,)).fetchall()
    try:
        tinker_memory.refuse_if_it_cannot_fit(
            need, tinker_memory.needs_of(rows), tinker_memory.needs_of([r for r in rows if r["status"] != "running"]),
            budget_mib=backend.settings.tinker_memory_mib, on_gpu=on_gpu, base_model=base_model)
    except InvalidInputError as exc:
        raise ApiError(400, "insufficient_memory", exc.message, hint=exc.hint) from None
    return need


def _require_local_worker(backend: Backend, base_model: str) -> None:
    """A training client's worker shares this machine's database with the API (the request queue): it runs here."""
    from synth_ai.backend.executors.placement import NoExecutorError, choose, job_needs

    try:
        where = choose(backend.settings.executor, job_needs(TINKER_KIND, base_model, {}))
    except NoExecutorError as exc:
        raise ApiError(400, exc.code, exc.message, hint=exc.hint) from None
    if where != "local":
        raise ApiError(400, "tinker_runs_locally",
                       f"Tinker training clients run on the backend's own machine, and this backend would run "
                       f"{base_model} with its {where} executor.",
                       hint="Serve the Tinker API from a backend started with `--executor local` (the default).")


def tokenizer_folder(backend: Backend, base_model: str) -> str:
    """The folder the SDK loads the tokenizer from (`get_info`'s tokenizer_id): a model this backend has."""
    if not base_model:
        raise InvalidInputError("base_model is empty.", hint="Name a model from get_server_capabilities.")
    folder = Path(base_model).expanduser()
    if folder.is_absolute():
        if not (folder / "config.json").exists():
            raise NotFoundError(f"Model folder '{base_model}' has no config.json.")
        return str(folder)
    try:
        return str(backend.model_store.get_model(base_model)["path"])
    except NotFoundError as exc:
        raise NotFoundError(f"Unknown base_model '{base_model}': it is not a model of this backend.",
                            hint="List the models with RestClient.get_server_capabilities() (or "
                                 "`synth-ai models list`), or pass a Hugging Face-format folder's path.") from exc


def _model(backend: Backend, model_id: Any) -> Any:
    row = queue_of(backend).model(str(model_id or ""))
    if row is None:
        raise ApiError(404, "not_found", f"Training client '{model_id}' is not known to this backend.",
                       hint="Create one with ServiceClient.create_lora_training_client().")
    return row


def saved_checkpoint(backend: Backend, owner: str, kind: str,
                     name: str) -> tuple[Any, tinker_checkpoints.SavedCheckpoint]:
    """The training client that saved `tinker://<owner>/<kind>/<name>`, and the checkpoint as it is on disk: 404
    when it was never saved (or was deleted), so a load or a sampler from it is refused here rather than by a
    worker started for it."""
    row = _model(backend, owner)
    try:
        found = tinker_checkpoints.find(tinker_checkpoints.checkpoints_root(backend.settings, row["job_id"]), kind,
                                        name)
    except InvalidInputError as exc:
        raise _bad(exc) from None
    if found is None:
        raise ApiError(404, "not_found", f"No checkpoint '{tinker_path(owner, kind, name)}' on this backend: it was "
                                         "never saved, or it was deleted.",
                       hint=f"RestClient.list_checkpoints('{owner}') lists the checkpoints that training client "
                            "saved; save_state and save_weights_for_sampler return their paths.")
    return row, found


@router.post("/get_info")
def get_info(request: Request, payload: dict[str, Any]) -> dict[str, Any]:
    backend = get_backend(request)
    row = _model(backend, _body(payload).get("model_id"))
    folder = tokenizer_folder(backend, row["base_model"])
    return {"model_id": row["id"], "type": "get_info", "is_lora": True, "lora_rank": row["lora_rank"],
            "model_name": row["base_model"], "optimizer_config": {"type": "adamw"},
            "model_data": {"model_name": row["base_model"], "tokenizer_id": folder, "arch": "qwen3"}}


@router.post("/forward_backward")
async def forward_backward(request: Request) -> dict[str, Any]:
    backend = get_backend(request)
    raw = await request.body()
    if "zstd" in request.headers.get("content-encoding", ""):
        raise ApiError(400, "invalid_request", "zstd-compressed bodies are not accepted (client/config says so).")
    try:
        message = tinker_wire.read_forward_backward(raw)
        check_loss(message["loss_fn"], message["loss_fn_config"])
        for index, datum in enumerate(message["data"]):
            check_datum(datum, message["loss_fn"], f"data[{index}]")
        if len({tuple(d["inputs"]["target_tokens"]["shape"][1:]) for d in message["data"]}) > 1:
            raise InvalidInputError("The datums' target_tokens have different numbers of columns (K); one "
                                    "forward_backward takes one K for all its datums.")
    except InvalidInputError as exc:
        raise _bad(exc) from None
    _model(backend, message["model_id"])
    op = "forward" if message["forward_only"] else "forward_backward"
    return _submit(backend, message["model_id"], message["seq_id"], op, message)


def _submit(backend: Backend, model_id: str, seq_id: Any, op: str, body: dict[str, Any]) -> dict[str, Any]:
    if isinstance(seq_id, bool) or not isinstance(seq_id, int) or seq_id < 1:
        raise ApiError(400, "invalid_request", f"seq_id must be a whole number >= 1 (found {seq_id!r}).")
    return {"request_id": queue_of(backend).submit(model_id, seq_id, op, body), "model_id": model_id}


@router.post("/optim_step")
def optim_step(request: Request, payload: dict[str, Any]) -> dict[str, Any]:
    backend = get_backend(request)
    body = _body(payload)
    row = _model(backend, body.get("model_id"))
    if body.get("optimizer_params") is not None:
        raise ApiError(400, "invalid_request", "Only Adam(W) optimizer steps are supported (adam_params).")
    return _submit(backend, row["id"], body.get("seq_id"), "optim_step", {"adam_params": body.get("adam_params")})


@router.post("/save_weights")
def save_weights(request: Request, payload: dict[str, Any]) -> dict[str, Any]:
    return _save(request, payload, "save_weights")


@router.post("/save_weights_for_sampler")
def save_weights_for_sampler(request: Request, payload: dict[str, Any]) -> dict[str, Any]:
    return _save(request, payload, "save_weights_for_sampler")


def _save(request: Request, payload: dict[str, Any], op: str) -> dict[str, Any]:
    backend = get_backend(request)
    body = _body(payload)
    row = _model(backend, body.get("model_id"))
    name = body.get("path")
    if name is not None:
        try:
            tinker_checkpoints.check_name(name)
        except InvalidInputError as exc:
            raise _bad(exc) from None
    if name is None and body.get("sampling_session_seq_id") is None:
        raise ApiError(400, "invalid_request", "Name the checkpoint (path) or ask for a sampling client.")
    return _submit(backend, row["id"], body.get("seq_id"), op,
                   {"name": name, "sampling_session_seq_id": body.get("sampling_session_seq_id"),
                    "session_id": row["session_id"]})


@router.post("/load_weights")
def load_weights(request: Request, payload: dict[str, Any]) -> dict[str, Any]:
    """`load_state` on a training client, or (no model_id) `create_training_client_from_state`: a new client on
    the saved state's base model and LoRA rank, its weights (and with `optimizer`, its Adam state) loaded."""
    backend = get_backend(request)
    body = _body(payload)
    try:
        owner, kind, name = parse_tinker_path(body.get("path"))
    except InvalidInputError as exc:
        raise _bad(exc) from None
    if kind != "weights":
        raise ApiError(400, "invalid_request", f"A saved state is a tinker://.../weights/<name> path; "
                                               f"'{body.get('path')}' is {kind}.")
    saved_by, _ = saved_checkpoint(backend, owner, kind, name)
    load = {"owner": owner, "name": name, "optimizer": bool(body.get("optimizer")), "path": body.get("path")}
    if body.get("model_id") is None:
        session_id = str(body.get("session_id") or "")
        if queue_of(backend).session(session_id) is None:
            raise ApiError(404, "not_found", f"Session '{session_id}' is not known to this backend.")
        lora = {"rank": saved_by["lora_rank"], "seed": 0}
        return _create_client(backend, session_id, body.get("model_seq_id"), saved_by["base_model"], lora,
                              user_metadata=body.get("user_metadata"), load=load)
    row = _model(backend, body.get("model_id"))
    return _submit(backend, row["id"], body.get("seq_id"), "load_weights", load)
