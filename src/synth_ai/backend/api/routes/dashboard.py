"""The browser dashboard: its pages (`/`, `/login`, `/logout`, `/dashboard/static/…`) and the few API routes only
it needs (`/api/dashboard/…`: login tokens, a job's checkpoints, eval runs from trace databases).

Everything else the page shows comes from the ordinary API, authenticated by the dashboard cookie
(`synth_ai.backend.api.dashboard_auth`). The page is static HTML/JS/CSS from `synth_ai/backend/static/`, shipped in the
wheel; it builds its DOM with `textContent` and SVG elements, never HTML strings, and the CSP below forbids inline
scripts, `eval` and every origin but this one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Body, FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from synth_ai.backend.api import eval_runs
from synth_ai.backend.api.auth import bearer_token
from synth_ai.backend.api.dashboard_auth import COOKIE, DEFAULT_TTL_S, MAX_TTL_S
from synth_ai.backend.api.routes.jobs_common import job_doc, load_job
from synth_ai.backend.api.state import get_backend
from synth_ai.backend.http_errors import ApiError
from synth_ai.backend.jobs.kinds import find_kind
from synth_ai.backend.store.db import loads
from synth_ai.errors import NotFoundError
from synth_ai.urls import join_url

router = APIRouter(tags=["dashboard"])

SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the login URL carries a token
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
_STATIC_NAME = re.compile(r"^[a-z0-9_-]+\.(html|js|css|svg)$")

LOGIN_REQUIRED = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>synth-ai: login required</title>
<link rel="icon" href="data:,"><link rel="stylesheet" href="/dashboard/static/style.css"></head>
<body><main class="notice"><h1>Login required</h1>
<p>{why}</p>
<p>Run <code>synth-ai backend open</code> on this machine: it prints a one-time login link (and opens it in your
browser when it can).</p></main></body></html>
"""


def _static(name: str) -> bytes:
    if not _STATIC_NAME.match(name):
        raise FileNotFoundError(name)
    return resources.files("synth_ai.backend").joinpath("static", name).read_bytes()


def _page(body: bytes | str, status: int = 200, media: str = "text/html; charset=utf-8") -> Response:
    return Response(body, status_code=status, media_type=media, headers=SECURITY_HEADERS)


def add_pages(app: FastAPI) -> None:
    """The unauthenticated routes: the page itself answers 401 with how to log in when the cookie is missing."""

    @app.get("/", include_in_schema=False)
    def index(request: Request) -> Response:
        key = request.cookies.get(COOKIE)
        if not key:
            return _page(LOGIN_REQUIRED.format(why="This dashboard needs a login."), 401)
        if not get_backend(request).keys.check(key):
            return _page(LOGIN_REQUIRED.format(why="Your login is no longer valid (its API key was removed)."), 401)
        return _page(_static("index.html"))

    @app.get("/login", include_in_schema=False)
    def login(request: Request, token: str | None = None) -> Response:
        key = get_backend(request).login_tokens.redeem(token)
        if key is None:
            return _page(LOGIN_REQUIRED.format(why="This login link is invalid, expired or already used."), 401)
        response = RedirectResponse("/", status_code=303, headers=SECURITY_HEADERS)
        secure = request.url.scheme == "https"
        response.set_cookie(COOKIE, key, httponly=True, samesite="strict", secure=secure, path="/")
        return response

    @app.get("/logout", include_in_schema=False)
    def logout() -> Response:
        response = _page(LOGIN_REQUIRED.format(why="You are logged out."), 200)
        response.delete_cookie(COOKIE, path="/")
        return response

    @app.get("/dashboard/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        try:
            body = _static(name)
        except (FileNotFoundError, IsADirectoryError):
            raise ApiError(404, "not_found", f"No dashboard file {name!r}.") from None
        return _page(body, media=STATIC_TYPES[name[name.rindex("."):]])


@router.post("/dashboard/login-token", status_code=201)
def login_token(request: Request, body: Any = Body(None)) -> dict[str, Any]:
    """A one-time login link for a browser, for the bearer key of this request (not a cookie's)."""
    key = bearer_token(request.headers.get("authorization"))
    if key is None:
        raise ApiError(403, "forbidden", "Login tokens are issued to API-key requests only.",
                       hint="Run `synth-ai backend open`.")
    ttl = (body or {}).get("ttl_s", DEFAULT_TTL_S) if isinstance(body, dict) else DEFAULT_TTL_S
    if not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or not 1 <= ttl <= MAX_TTL_S:
        raise ApiError(400, "invalid_request", f"ttl_s must be a number of seconds from 1 to {MAX_TTL_S}.")
    token = get_backend(request).login_tokens.issue(key, float(ttl))
    return {"token": token, "url": join_url(str(request.base_url), f"login?token={token}"), "expires_in": ttl}


@router.get("/dashboard/jobs/{job_id}")
def job(request: Request, job_id: str) -> dict[str, Any]:
    """A job of either kind (the page learns from `job_type` whether its routes are under /learning or /rl)."""
    backend = get_backend(request)
    return job_doc(backend, load_job(backend, job_id, None))


@router.get("/dashboard/jobs/{job_id}/checkpoints")
def checkpoints(request: Request, job_id: str) -> dict[str, Any]:
    """Checkpoints the job reported (from its events) and whether each is still on disk (older ones are pruned).
    `step` is the SFT step or the RL iteration the checkpoint was saved after, as `unit` says."""
    backend = get_backend(request)
    row = load_job(backend, job_id, None)
    rows = backend.db.conn().execute(
        "SELECT seq, data, created_at FROM events WHERE job_id = ? AND type LIKE '%.checkpoint.saved' ORDER BY seq",
        (job_id,))
    found = []
    for event in rows:
        data = loads(event["data"]) or {}
        path = str(data.get("path") or "")
        found.append({"step": data.get("step", data.get("iteration")), "saved_at": event["created_at"],
                      "on_disk": bool(path) and Path(path).is_dir()})
    return {"job_id": job_id, "checkpoints": found, "unit": _checkpoint_unit(row["kind"]),
            "fine_tuned_model": row["fine_tuned_model"]}


def _checkpoint_unit(kind_name: str) -> str:
    kind = find_kind(kind_name)
    return kind.checkpoint_unit if kind is not None else "step"


@router.get("/dashboard/evals")
def evals(request: Request) -> dict[str, Any]:
    return eval_runs.list_runs(get_backend(request).settings.traces)


def _read_or_404(read: Callable[[list[Path], str, str], dict[str, Any]], request: Request, database: str,
                 key: str) -> dict[str, Any]:
    """One eval read of a configured trace database; a database, run or session that is not there answers 404."""
    try:
        return read(get_backend(request).settings.traces, database, key)
    except NotFoundError as exc:
        raise ApiError(404, "not_found", exc.message, hint=exc.hint) from None


@router.get("/dashboard/evals/{database}/runs/{run_id:path}")
def eval_run(request: Request, database: str, run_id: str) -> dict[str, Any]:
    return _read_or_404(eval_runs.run_detail, request, database, run_id)


@router.get("/dashboard/evals/{database}/sessions/{session_id:path}")
def eval_session(request: Request, database: str, session_id: str) -> dict[str, Any]:
    return _read_or_404(eval_runs.transcript, request, database, session_id)
