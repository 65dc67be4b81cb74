"""Which backend a command talks to, and the one way its URL is normalised.

Precedence: `--backend` > `BACKEND_BASE_URL` > `SYNTH_BACKEND_URL_OVERRIDE` (or the older `BACKEND_OVERRIDE`)
= local|dev|prod, each read from `LOCAL_BACKEND_URL`, `DEV_BACKEND_URL`, `PROD_BACKEND_URL` > the embedded
backend on 127.0.0.1:8000. Every URL ends in `/api`, as synth-ai 0.2.17's `ensure_api_base` made it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from synth_ai.errors import InvalidInputError
from synth_ai.urls import join_url

EMBEDDED_HOST = "127.0.0.1"
DEFAULT_EMBEDDED_PORT = 8000
PORT_ENV = "SYNTH_AI_BACKEND_PORT"  # moves the embedded backend (serve/start default, and where clients look)
HOSTED_PROD_URL = "https://agent-learning.onrender.com"


def embedded_port(environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    raw = env.get(PORT_ENV, "").strip()
    if not raw:
        return DEFAULT_EMBEDDED_PORT
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise InvalidInputError(f"{PORT_ENV}={raw!r} is not a port number.", hint=f"Set {PORT_ENV} to 1-65535.")
    return int(raw)


def embedded_url(environ: Mapping[str, str] | None = None) -> str:
    return f"http://{EMBEDDED_HOST}:{embedded_port(environ)}"


@dataclass(frozen=True)
class BackendTarget:
    api_base: str  # always ends in /api
    source: str  # which setting chose it, for messages ("--backend", "BACKEND_BASE_URL", ...)
    embedded: bool  # True when it is this machine's embedded backend (train may start it)
    started_here: bool = False  # this command started it (and stops it again if it refuses to use it)


def ensure_api_base(url: str) -> str:
    """`http://host:8000/` -> `http://host:8000/api`; an existing `/api` suffix is kept."""
    base = url.strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise InvalidInputError(f"Backend URL {url!r} must start with http:// or https://.",
                                hint="Pass e.g. --backend http://127.0.0.1:8000")
    return base if base.endswith("/api") else join_url(base, "api")


def resolve_backend(flag: str | None = None, environ: Mapping[str, str] | None = None) -> BackendTarget:
    env = os.environ if environ is None else environ
    if flag and flag.strip():
        api = ensure_api_base(flag)
        return BackendTarget(api, "--backend", _is_embedded(api, env))
    if env.get("BACKEND_BASE_URL", "").strip():
        api = ensure_api_base(env["BACKEND_BASE_URL"])
        return BackendTarget(api, "BACKEND_BASE_URL", _is_embedded(api, env))
    for name in ("SYNTH_BACKEND_URL_OVERRIDE", "BACKEND_OVERRIDE"):
        choice = env.get(name, "").strip().lower()
        if not choice:
            continue
        if choice not in {"local", "dev", "prod"}:
            raise InvalidInputError(f"{name}={choice!r} is not one of local, dev, prod.",
                                    hint=f"Set {name} to local, dev or prod, or use --backend URL.")
        defaults = {"local": embedded_url(env), "dev": None, "prod": HOSTED_PROD_URL}
        url = env.get(f"{choice.upper()}_BACKEND_URL", "").strip() or defaults[choice]
        if not url:
            raise InvalidInputError(f"{name}={choice} needs {choice.upper()}_BACKEND_URL to be set.",
                                    hint=f"Export {choice.upper()}_BACKEND_URL=https://... or use --backend URL.")
        api = ensure_api_base(url)
        return BackendTarget(api, f"{name}={choice}", _is_embedded(api, env))
    return BackendTarget(ensure_api_base(embedded_url(env)), "embedded default", True)


def _is_embedded(api_base: str, env: Mapping[str, str]) -> bool:
    port = embedded_port(env)
    return api_base.startswith((f"http://localhost:{port}/", f"http://{EMBEDDED_HOST}:{port}/"))
