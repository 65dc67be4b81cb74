"""The preflight `serve`, `deploy` and `modal-serve` run: hand the task app's ENVIRONMENT_API_KEY, sealed, to the
backend `train` would use (`--backend` / `BACKEND_BASE_URL` / the embedded one).

Unlike 0.2.17 it never targets a hosted default nobody configured: the embedded backend is reached only if it runs
on this machine (it is never started for this), a hosted one only with SYNTH_API_KEY. Failures warn and return
`failed`: the app runs either way, and `train --type rl` shares the key again before creating a job. The key never
appears in output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx

from synth_ai.client.connect import api_key_for
from synth_ai.client.env_keys import EnvKeys
from synth_ai.client.transport import RetryPolicy, Transport
from synth_ai.connect.embedded_backend import running_embedded_backend
from synth_ai.env.backend_url import resolve_backend
from synth_ai.env.secrets import mask_secret
from synth_ai.errors import NotFoundError, SynthError

PREFLIGHT_TIMEOUT = httpx.Timeout(connect=3.0, read=15.0, write=15.0, pool=3.0)


@dataclass
class ShareResult:
    status: str  # "uploaded" | "skipped" | "failed"
    message: str
    api_base: str | None = None


def share_environment_key(key: str | None, *, say: Callable[[str], None], warn: Callable[[str], None],
                          backend_flag: str | None = None,
                          transport_factory: Callable[..., Transport] = Transport) -> ShareResult:
    """Upload `key` to the configured backend (see the module doc)."""
    if not key:
        return ShareResult("skipped", "no ENVIRONMENT_API_KEY to share")
    where = "the backend"
    try:
        backend = resolve_backend(backend_flag)
        if backend.embedded and backend.source == "embedded default":
            found = running_embedded_backend()
            if found is None:
                return ShareResult("skipped", "no embedded backend runs on this machine; `synth-ai train` shares "
                                   "the key when it starts one")
            backend = type(backend)(found["api_base"], backend.source, True)
        where = backend.api_base
        api_key = api_key_for(backend)
        if not api_key:
            return ShareResult("skipped", f"no API key for {backend.api_base} (SYNTH_API_KEY); the key was not "
                               "shared", backend.api_base)
        say(f"[preflight] sharing ENVIRONMENT_API_KEY ({mask_secret(key)}) with {backend.api_base}, sealed")
        transport = transport_factory(backend.api_base, api_key, timeout=PREFLIGHT_TIMEOUT,
                                      retry=RetryPolicy(max_retries=1), embedded=backend.embedded)
        try:
            routes = EnvKeys(transport)
            routes.upload(key)
            verified = routes.verify()
        finally:
            transport.close()
    except NotFoundError:
        message = f"{where} has no env-key routes; the key was not shared"
        warn(message)
        return ShareResult("failed", message, where)
    except SynthError as exc:
        warn(f"[preflight] could not share ENVIRONMENT_API_KEY: {exc.message}")
        return ShareResult("failed", exc.message, where)
    if not (isinstance(verified, dict) and verified.get("present")):
        message = f"{where} accepted the key but does not report it present"
        warn(message)
        return ShareResult("failed", message, where)
    say("[preflight] ✓ ENVIRONMENT_API_KEY uploaded and verified")
    return ShareResult("uploaded", "uploaded and verified", where)


def share_for_serve(say: Callable[[str], None]) -> Callable[[str | None], ShareResult]:
    """The step `serve_task_app` runs before the server starts (its `share_key`): share the key, saying why when it
    was skipped; a failure only warns, as in 0.2.17's serve."""
    def share(key: str | None) -> ShareResult:
        result = share_environment_key(key, say=say, warn=lambda message: say(f"[WARN] {message}"))
        if result.status == "skipped":
            say(f"[preflight] {result.message}")
        return result

    return share
