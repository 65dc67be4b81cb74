"""The embedded backend's FastAPI application: the learning API under `/api`, `/health` outside it.

`create_app(settings)` wires one `Backend` (database, blob store, file and job services, scheduler, key checker)
into the app; its lifespan migrates the database, settles what a previous run left half-done and starts the
scheduler, and on shutdown stops the workers (their jobs resume at the next start).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from synth_ai import __version__
from synth_ai.apidocs import add_keyed_docs
from synth_ai.backend.auth import KeyChecker, accepted_keys, bearer_token, ensure_keys, environment_keys
from synth_ai.backend.capabilities import training_capability
from synth_ai.backend.changes import ChangeWatcher
from synth_ai.backend.dashboard_auth import LoginTokens, cookie_key
from synth_ai.backend.db import Database
from synth_ai.backend.errors import ApiError, error_body
from synth_ai.backend.files import FileService
from synth_ai.backend.jobs import JobStore
from synth_ai.backend.settings import BackendSettings
from synth_ai.backend.storage import BlobStore
from synth_ai.backend.workers import Scheduler
from synth_ai.env.secrets import redact, secret_values

log = logging.getLogger("synth_ai.backend")


class Backend:
    """Everything a request handler needs, created once per server."""

    def __init__(self, settings: BackendSettings) -> None:
        self.settings = settings
        settings.ensure_dirs()
        self.db = Database(settings.db_path)
        self.blobs = BlobStore(settings.blobs_dir, settings.tmp_dir)
        self.files = FileService(self.db, self.blobs)
        self.jobs = JobStore(self.db)
        self.changes = ChangeWatcher(settings.db_path)  # wakes live job streams (routes/job_stream.py)
        self.scheduler = Scheduler(settings, self.db)
        self.keys = KeyChecker(settings.data_dir)
        self.login_tokens = LoginTokens()
        self.validation_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="synth-ai-validate")
        self.blob_lock = threading.Lock()  # blob commit + row insert vs row delete + blob delete
        self._engine: Any = None
        self._model_store: Any = None
        self._engine_lock = threading.Lock()

    def startup(self) -> None:
        self.db.migrate()
        ensure_keys(self.settings.data_dir)
        removed = self.blobs.clean_tmp()
        if removed:
            log.info("removed %d partial upload(s) left by a previous run", removed)
        for file_id in self.files.pending_validation():
            self.validation_pool.submit(self.files.validate, file_id)
        for action in self.scheduler.settle_on_startup():
            log.info("settled job %s: %s", action["job_id"], action["action"])
        self.scheduler.start()

    def shutdown(self) -> None:
        self.scheduler.shutdown(timeout=self.settings.cancel_grace_s)
        self.validation_pool.shutdown(wait=False, cancel_futures=True)
        engine = self._engine
        if engine is not None and hasattr(engine, "close"):
            try:
                engine.close()
            except Exception:  # noqa: BLE001
                log.exception("closing the inference engine failed")
        self.db.close()

    # Lazily created ML pieces (the inference engine imports torch only when first used) -------------------------
    @property
    def model_store(self) -> Any:
        if self._model_store is None:
            from synth_ai.backend.modelstore import ModelStore

            self._model_store = ModelStore(self.settings.data_dir)
        return self._model_store

    def engine(self) -> Any:
        with self._engine_lock:
            if self._engine is None:
                from synth_ai.backend.inference.engine import InferenceEngine

                self._engine = InferenceEngine(self.model_store)
            return self._engine


def get_backend(request: Request) -> Backend:
    return request.app.state.backend


def require_auth(request: Request) -> None:
    backend: Backend = request.app.state.backend
    token = bearer_token(request.headers.get("authorization"))
    if token is None:  # the dashboard: its cookie, with the header a cross-site request cannot send
        token = cookie_key(request.cookies, request.headers)
    if token is None:
        raise ApiError(401, "unauthorized", "Missing API key: send `Authorization: Bearer <key>`.",
                       hint=_key_hint(backend), headers={"WWW-Authenticate": "Bearer"})
    if not backend.keys.check(token):
        raise ApiError(401, "unauthorized", "Invalid API key for this backend.",
                       hint=_key_hint(backend), headers={"WWW-Authenticate": "Bearer"})


def _key_hint(backend: Backend) -> str:
    return (f"The embedded backend's keys are in {backend.settings.data_dir / 'backend_keys.json'}; "
            "`synth-ai setup --local` writes one into your .env as SYNTH_API_KEY.")


def create_app(settings: BackendSettings | None = None) -> FastAPI:
    settings = settings or BackendSettings.load()
    backend = Backend(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        backend.startup()
        try:
            yield
        finally:
            backend.shutdown()

    app = FastAPI(title="synth-ai embedded backend", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)  # the docs need the key: add_keyed_docs
    app.state.backend = backend

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        issues = [{"loc": list(e.get("loc", ())), "message": e.get("msg", ""), "type": e.get("type", "")}
                  for e in exc.errors()]
        first = issues[0] if issues else {"loc": [], "message": "invalid request"}
        where = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
        return JSONResponse(error_body("invalid_request", f"Invalid request: {where}: {first['message']}",
                                       details={"issues": issues}), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else "HTTP error"
        if exc.status_code == 404 and message == "Not Found":
            message = f"No route {request.method} {request.url.path} on this backend."
        return JSONResponse(error_body(code, message), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error in %s %s", request.method, request.url.path)
        # The exception text may quote anything, keys included: scrub every secret this backend knows.
        known = [*secret_values(), *accepted_keys(settings.data_dir), *environment_keys(settings.data_dir)]
        text = redact(str(exc), sorted(set(known), key=len, reverse=True))
        return JSONResponse(error_body("internal", f"Internal error: {type(exc).__name__}: {text}",
                                       hint="This is a bug in the synth-ai backend; the log has the traceback."),
                            status_code=500)

    training = training_capability()  # the environment does not change while the server runs

    @app.get("/health", include_in_schema=False)
    def health() -> dict[str, Any]:
        return {"status": "ok", "service": "synth-ai-backend", "version": __version__, "training": training}

    from synth_ai.backend.routes import dashboard, env_keys, files, inference, learning, rl

    api_deps = [Depends(require_auth)]
    add_keyed_docs(app, api_deps)
    for module in (files, learning, rl, inference, env_keys, dashboard):
        app.include_router(module.router, prefix="/api", dependencies=api_deps)
    dashboard.add_pages(app)

    @app.get("/api/health", dependencies=api_deps, include_in_schema=False)
    def api_health() -> dict[str, Any]:
        return {"status": "ok", "service": "synth-ai-backend", "version": __version__, "authenticated": True,
                "training": training}

    return app
