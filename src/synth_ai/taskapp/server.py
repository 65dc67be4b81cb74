"""`create_task_app(config)`: a `TaskAppConfig` turned into a FastAPI app with the reference's routes and auth.

| route            | auth | answer                                                                        |
|------------------|------|-------------------------------------------------------------------------------|
| `GET /`          | no   | `{"status": "ok", "service": app_id}`                                         |
| `HEAD /`         | no   | 200                                                                           |
| `GET /health`    | yes  | `{"healthy": true, "auth": {"required": …, "expected_prefix": <masked key>}}` |
| `GET /info`      | yes  | service/task, dataset, rubrics, inference, limits                             |
| `GET /task_info` | yes  | `{"taskset": …}`; with `seed`/`seeds`: one `TaskInfo`, or a list for several   |
| `POST /rollout`  | yes  | `RolloutResponse` (422 when the request does not validate, e.g. no `mode`)    |
| `POST /done`     | yes  | `{"ok": true, "service": app_id}`                                             |
| `GET /debug/env` | yes  | which keys are set, masked                                                    |

Error bodies are `{"detail": {"error": {"code", "message", …}}}`. Rollouts are recorded in the traces v3 SQLite
schema when tracing is enabled (see `synth_ai.taskapp.tracing`).
"""

from __future__ import annotations

import inspect
import logging
import math
import os
from collections.abc import Iterable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.routing import Route

from synth_ai.apidocs import add_keyed_docs
from synth_ai.env.secrets import mask_secret, redact
from synth_ai.taskapp import auth
from synth_ai.taskapp.config import TaskAppConfig
from synth_ai.taskapp.contracts import RolloutRequest, RolloutResponse, TaskInfo
from synth_ai.taskapp.errors import RolloutError, TaskAppError
from synth_ai.taskapp.rollout_lane import RolloutLane
from synth_ai.taskapp.tracing import RolloutTracer, TracingSettings, use_trace

log = logging.getLogger("synth_ai.taskapp")


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _dump(value: Any) -> Any:
    """JSON-ready form of what an app returned (pydantic models, lists of them, plain data)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_dump(v) for v in value]
    return value


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


async def _require_key(request: Request) -> None:
    # async on purpose: FastAPI runs a plain `def` dependency in its thread pool, a thread hop per request for a
    # check that does no I/O
    headers = request.headers
    candidates = auth.presented_keys(
        headers.getlist("x-api-key"), headers.getlist("x-api-keys"), headers.getlist("authorization")
    )
    auth.check_api_key(candidates)


def _parse_seeds(seed: list[str] | None, seeds: list[str] | None) -> list[int]:
    values: list[int] = []
    for raw in [*(seed or []), *(seeds or [])]:
        for part in str(raw).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                values.append(int(part))
            except ValueError:
                raise TaskAppError(
                    f"seed must be an integer, not {part!r}", status_code=422, code="invalid_seed"
                ) from None
    return values


def create_task_app(config: TaskAppConfig, *, tracing: TracingSettings | None = None) -> FastAPI:
    """Build the FastAPI app for `config`. Tracing settings default to the environment (`TASKAPP_TRACING_*`)."""
    settings = tracing if tracing is not None else TracingSettings.from_env()
    tracer = RolloutTracer(settings, app_id=config.app_id)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        auth.normalize_environment_api_key()
        for hook in config.startup_hooks:
            await _maybe_await(hook(app))
        try:
            yield
        finally:
            for hook in config.shutdown_hooks:
                try:
                    await _maybe_await(hook(app))
                except Exception:  # a failing hook must not hide the others
                    log.exception("task app shutdown hook failed")
            tracer.close()

    app = FastAPI(title=config.name, description=config.description, lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)  # added below, behind the same key check as the routes
    app.state.task_app_config = config
    app.state.tracer = tracer
    for key, value in config.app_state.items():
        setattr(app.state, key, value)

    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_credentials=True,
                           allow_methods=["*"], allow_headers=["*"])

    @app.exception_handler(TaskAppError)
    async def _task_app_error(_: Request, exc: TaskAppError) -> JSONResponse:
        return JSONResponse(exc.to_body(), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own 422 (same shape) echoes the input, and a body holding NaN or 1e999 then failed to
        # serialise: a 500 for bad input. Non-finite numbers are echoed as text instead.
        return JSONResponse({"detail": _json_safe(jsonable_encoder(exc.errors()))}, status_code=422)

    guard = [Depends(_require_key)] if config.require_api_key else []
    add_keyed_docs(app, guard)

    @app.get("/")
    async def root() -> dict[str, Any]:
        return {"status": "ok", "service": config.app_id}

    @app.head("/")
    async def root_head() -> Response:
        return Response(status_code=200)

    @app.get("/health", dependencies=guard)
    async def health() -> dict[str, Any]:
        return {
            "healthy": True,
            "auth": {
                "required": config.require_api_key,
                "expected_prefix": mask_secret(auth.primary_environment_api_key()),
            },
        }

    @app.post("/done", dependencies=guard)
    async def done() -> dict[str, Any]:
        return {"ok": True, "service": config.app_id}

    @app.get("/info", dependencies=guard)
    async def info() -> dict[str, Any]:
        base = config.base_task_info
        rubrics = None
        if config.rubrics.outcome is not None or config.rubrics.events is not None:
            rubrics = {"outcome": _dump(config.rubrics.outcome), "events": _dump(config.rubrics.events)}
        return {
            "service": {"task": _dump(base.task), "version": base.task.version},
            "dataset": _dump(base.dataset),
            "rubrics": rubrics,
            "inference": _dump(base.inference),
            "limits": _dump(base.limits),
        }

    @app.get("/task_info", dependencies=guard)
    async def task_info(
        seed: list[str] | None = Query(default=None),
        seeds: list[str] | None = Query(default=None),
    ) -> Any:
        wanted = _parse_seeds(seed, seeds)
        if not wanted:
            return {"taskset": _dump(await _maybe_await(config.describe_taskset()))}
        instances = await _maybe_await(config.provide_task_instances(wanted))
        try:
            docs = [_dump(TaskInfo.model_validate(_dump(i))) for i in _as_list(instances)]
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first.get("loc", ()))
            raise TaskAppError(f"provide_task_instances returned an invalid TaskInfo: field '{field}': "
                               f"{first.get('msg')}", status_code=500, code="invalid_task_info") from exc
        return docs[0] if len(wanted) == 1 and len(docs) == 1 else docs

    async def answer_rollout(rollout_request: RolloutRequest, request: Request) -> JSONResponse:
        recorder = tracer.begin(rollout_request)
        request.state.trace = recorder
        try:
            with use_trace(recorder):
                result = await _maybe_await(config.rollout(rollout_request, request))
        except TaskAppError:
            raise
        except Exception as exc:
            log.exception("rollout %s failed", rollout_request.run_id)
            raise RolloutError(redact(f"Rollout failed: {type(exc).__name__}: {exc}")) from exc
        doc = _coerce_response(result)
        if recorder is not None:
            trace = await tracer.finish(recorder, rollout_request, doc)
            if trace is not None and doc.get("trace") is None:
                doc["trace"] = trace
        return JSONResponse(doc)

    @app.post("/rollout", dependencies=guard)
    async def rollout(rollout_request: RolloutRequest, request: Request) -> JSONResponse:
        return await answer_rollout(rollout_request, request)

    # plainly valid requests take a lane in front of this route (rollout_lane: a third of the CPU per rollout)
    lane = RolloutLane(app.router.routes[-1], answer_rollout, _require_key if config.require_api_key else None)
    app.router.routes.insert(0, Route("/rollout", lane, methods=["POST"]))

    if config.expose_debug_env:

        @app.get("/debug/env", dependencies=guard)
        async def debug_env() -> dict[str, Any]:
            return {
                "has_ENVIRONMENT_API_KEY": bool(auth.primary_environment_api_key()),
                "ENVIRONMENT_API_KEY_prefix": mask_secret(auth.primary_environment_api_key()),
                "OPENAI_API_KEY_prefix": mask_secret(os.environ.get("OPENAI_API_KEY")),
                "GROQ_API_KEY_prefix": mask_secret(os.environ.get("GROQ_API_KEY")),
            }

    if config.proxy is not None and (config.proxy.enable_openai or config.proxy.enable_groq):
        from synth_ai.taskapp.proxy import add_proxy_routes

        add_proxy_routes(app, config.proxy, guard)

    for router in config.routers:
        app.include_router(router, dependencies=guard)
    return app


def _as_list(instances: Any) -> list[Any]:
    if instances is None:
        return []
    if isinstance(instances, (dict, TaskInfo)):
        return [instances]
    if isinstance(instances, Iterable):
        return list(instances)
    return [instances]


def _coerce_response(result: Any) -> dict[str, Any]:
    """Validate an app's rollout result against `RolloutResponse`. As in the reference, a result that does not
    validate is still returned as-is (the verifier reports the mismatch); it is logged here."""
    if isinstance(result, RolloutResponse):
        return result.model_dump(mode="json")
    doc = _dump(result)
    if not isinstance(doc, dict):
        raise RolloutError(f"The task app's rollout returned {type(result).__name__}, not a RolloutResponse")
    try:
        return RolloutResponse.model_validate(doc).model_dump(mode="json")
    except ValidationError as exc:
        log.warning("rollout response does not match RolloutResponse: %s", exc)
        return doc
