"""The embedded backend's FastAPI application: the learning API under `/api`, `/health` outside it.

`create_app(settings)` wires one `Backend` (database, blob store, file and job services, scheduler, key checker)
into the app; its lifespan migrates the database, settles what a previous run left half-done and starts the
scheduler, and on shutdown stops the workers (their jobs resume at the next start).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from synth_ai import __version__
from synth_ai.apidocs import add_keyed_docs
from synth_ai.backend.api.capabilities import training_capability
from synth_ai.backend.api.state import Backend, require_auth
from synth_ai.backend.http_errors import ApiError, error_body
from synth_ai.backend.server_settings import BackendSettings
from synth_ai.env.backend_keys import accepted_keys, environment_keys
from synth_ai.env.secrets import redact, secret_values

log = logging.getLogger("synth_ai.backend")


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

    from synth_ai.backend.api.routes import (
        dashboard,
        env_keys,
        exports,
        files,
        imports,
        inference,
        learning,
        rl,
        tinker_api,
        tinker_futures,
        tinker_rest,
    )

    api_deps = [Depends(require_auth)]
    add_keyed_docs(app, api_deps)
    for module in (files, learning, rl, inference, env_keys, dashboard, exports, imports):
        app.include_router(module.router, prefix="/api", dependencies=api_deps)
    dashboard.add_pages(app)
    tinker_deps = [Depends(tinker_api.require_tinker_key)]  # the Tinker SDK's own header (docs/tinker.md)
    for module in (tinker_api, tinker_futures, tinker_rest):
        app.include_router(module.router, prefix="/api/v1", dependencies=tinker_deps, include_in_schema=False)

    @app.get("/api/health", dependencies=api_deps, include_in_schema=False)
    def api_health() -> dict[str, Any]:
        return {"status": "ok", "service": "synth-ai-backend", "version": __version__, "authenticated": True,
                "training": training}

    return app
