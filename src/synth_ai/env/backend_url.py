"""Which backend a command talks to, and the one way its URL is normalised.

Precedence: `--backend` > `BACKEND_BASE_URL` > `SYNTH_BACKEND_URL_OVERRIDE` (or the older `BACKEND_OVERRIDE`)
= local|dev|prod, each read from `LOCAL_BACKEND_URL`, `DEV_BACKEND_URL`, `PROD_BACKEND_URL` > the embedded
backend of this data dir. Every URL ends in `/api`, as synth-ai 0.2.17's `ensure_api_base` made it.

The embedded backend listens on 127.0.0.1:8000 when that port is free and on a free port otherwise; where it runs
is recorded in the data dir (`env.backend_record`). A setting that names the default address (127.0.0.1:8000 in
a `.env`) therefore means the recorded backend while one runs: never the other program that holds port 8000.
An explicit `--backend` is taken as given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from synth_ai.errors import InvalidInputError
from synth_ai.urls import join_url

EMBEDDED_HOST = "127.0.0.1"
DEFAULT_EMBEDDED_PORT = 8000
PORT_ENV = "SYNTH_AI_BACKEND_PORT"  # the embedded backend's port, taken as given (an error when it is busy)
DEFAULT_PORT_ENV = "SYNTH_AI_BACKEND_DEFAULT_PORT"  # the port tried first when none is given (8000)
HOSTED_PROD_URL = "https://agent-learning.onrender.com"


def _port_setting(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise InvalidInputError(f"{name}={raw!r} is not a port number.", hint=f"Set {name} to 1-65535.")
    return int(raw)


def requested_port(environ: Mapping[str, str] | None = None) -> int | None:
    """`SYNTH_AI_BACKEND_PORT`: a port the user chose, which the backend takes or fails on; None when unset."""
    return _port_setting(os.environ if environ is None else environ, PORT_ENV)


def default_port(environ: Mapping[str, str] | None = None) -> int:
    """The port a backend started without one tries first: `SYNTH_AI_BACKEND_DEFAULT_PORT`, else 8000."""
    return _port_setting(os.environ if environ is None else environ, DEFAULT_PORT_ENV) or DEFAULT_EMBEDDED_PORT


def embedded_port(environ: Mapping[str, str] | None = None) -> int:
    """Where the embedded backend listens when it could choose: the requested port, else the default one."""
    port = requested_port(environ)
    return default_port(environ) if port is None else port


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
    running = _running_api_base()
    if flag and flag.strip():
        api = ensure_api_base(flag)
        return BackendTarget(api, "--backend", _is_embedded(api, env, running))
    if env.get("BACKEND_BASE_URL", "").strip():
        return _setting_target(ensure_api_base(env["BACKEND_BASE_URL"]), "BACKEND_BASE_URL", env, running)
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
        return _setting_target(ensure_api_base(url), f"{name}={choice}", env, running)
    return BackendTarget(running or ensure_api_base(embedded_url(env)), "embedded default", True)


def _running_api_base() -> str | None:
    """The API base of the backend running on this data dir, from its record."""
    from synth_ai.env.backend_record import running_record

    record = running_record()
    return ensure_api_base(record["api_base"]) if record else None


def _setting_target(api: str, source: str, env: Mapping[str, str], running: str | None) -> BackendTarget:
    """A URL from the environment: the default embedded address means the recorded backend while one runs."""
    if running and _is_default_address(api, env):
        return BackendTarget(running, source, True)
    return BackendTarget(api, source, _is_embedded(api, env, running))


def _loopback_port(api_base: str) -> int | None:
    """The port of an http URL on this machine's loopback address, else None."""
    parts = urlsplit(api_base)
    if parts.scheme != "http" or parts.hostname not in {"localhost", EMBEDDED_HOST}:
        return None
    try:
        return parts.port
    except ValueError:  # not a port number: no backend of ours listens there
        return None


def _is_default_address(api_base: str, env: Mapping[str, str]) -> bool:
    return _loopback_port(api_base) == embedded_port(env) and urlsplit(api_base).path.rstrip("/") == "/api"


def _is_embedded(api_base: str, env: Mapping[str, str], running: str | None) -> bool:
    """This machine's embedded backend: the recorded one, or the default address (where one would start)."""
    port = _loopback_port(api_base)
    return port is not None and port in {embedded_port(env), _loopback_port(running) if running else None}


FREE_PORT_PLACEHOLDER = "<free port>"


def as_it_would_start(target: BackendTarget, environ: Mapping[str, str] | None = None) -> tuple[BackendTarget,
                                                                                             str | None]:
    """The embedded default as a real run would reach it, for a dry run: when none runs yet and another program
    holds the default port, the backend will start on a port the kernel picks then, so the URL shows
    `<free port>` (never the other program's port); with it, the notice that says why. Any other target as it is."""
    from synth_ai.ports import port_in_use

    env = os.environ if environ is None else environ
    if not (target.embedded and target.source == "embedded default") or requested_port(env) is not None:
        return target, None
    port = default_port(env)
    if _running_api_base() is not None or not port_in_use(EMBEDDED_HOST, port):
        return target, None
    moved = BackendTarget(ensure_api_base(f"http://{EMBEDDED_HOST}:{FREE_PORT_PLACEHOLDER}"), target.source, True)
    return moved, (f"Port {port} is taken by another program: the embedded backend will start on a free port, "
                   f"picked when it starts (shown as {FREE_PORT_PLACEHOLDER}); `synth-ai backend start` starts it "
                   "now, and a dry run then shows its port.")
