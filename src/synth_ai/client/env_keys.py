"""Handing the backend a task app's ENVIRONMENT_API_KEY, sealed to the backend's public key (libsodium sealed box,
as synth-ai 0.2.17's preflight did): `GET /v1/crypto/public-key` → `POST /v1/env-keys` → `GET /v1/env-keys/verify`.

`share_environment_key` is the preflight `serve`, `deploy`, `modal-serve` and `train --type rl` run. It targets the
backend `train` would use (`--backend` / `BACKEND_BASE_URL` / the embedded one) and, unlike 0.2.17, never a hosted
default nobody configured: the embedded backend is reached only if it runs on this machine, a hosted one only with
SYNTH_API_KEY. The key never appears in output; PyNaCl is imported only when sealing.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from synth_ai.client.transport import RetryPolicy, Transport
from synth_ai.env.secrets import mask_secret
from synth_ai.errors import InvalidInputError, NotFoundError, SynthError, UnavailableError

ALG = "libsodium.sealedbox.v1"
MAX_KEY_BYTES = 8 * 1024
PREFLIGHT_TIMEOUT = httpx.Timeout(connect=3.0, read=15.0, write=15.0, pool=3.0)


def seal(public_key_b64: str, secret: str) -> str:
    """`secret` encrypted to the X25519 public key, base64 (what `POST /v1/env-keys` takes as `ciphertext_b64`)."""
    try:
        raw = base64.b64decode(public_key_b64, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise InvalidInputError("The backend's public key is not base64.") from None
    if len(raw) != 32:
        raise InvalidInputError(f"The backend's public key is {len(raw)} bytes; an X25519 key is 32.")
    data = secret.encode("utf-8")
    if not data or len(data) > MAX_KEY_BYTES:
        raise InvalidInputError(f"ENVIRONMENT_API_KEY must be 1 to {MAX_KEY_BYTES} bytes (found {len(data)}).")
    try:
        from nacl.public import PublicKey, SealedBox
    except ImportError:
        raise UnavailableError("Sealing the key needs PyNaCl.", hint="pip install pynacl") from None
    return base64.b64encode(SealedBox(PublicKey(raw)).encrypt(data)).decode("ascii")


class EnvKeys:
    """The env-key routes of a backend."""

    def __init__(self, transport: Transport) -> None:
        self.t = transport

    def public_key(self) -> str:
        doc = self.t.get_json("/v1/crypto/public-key")
        key = doc.get("public_key") if isinstance(doc, dict) else None
        alg = doc.get("alg") if isinstance(doc, dict) else None
        if not isinstance(key, str) or not key:
            raise InvalidInputError(f"{self.t.url('/v1/crypto/public-key')} answered without a public_key.")
        if alg is not None and alg != ALG:
            raise InvalidInputError(f"The backend seals with {alg!r}; this client speaks {ALG}.")
        return key

    def upload(self, key: str, *, name: str = "ENVIRONMENT_API_KEY") -> dict[str, Any]:
        # No idempotency key needed: the upload is an upsert, repeating it changes nothing.
        return self.t.post_json("/v1/env-keys", {"name": name, "ciphertext_b64": seal(self.public_key(), key)})

    def verify(self, *, name: str = "ENVIRONMENT_API_KEY") -> dict[str, Any]:
        return self.t.get_json("/v1/env-keys/verify", params={"name": name})


@dataclass
class ShareResult:
    status: str  # "uploaded" | "skipped" | "failed"
    message: str
    api_base: str | None = None


def share_environment_key(key: str | None, *, say: Callable[[str], None], warn: Callable[[str], None],
                          backend_flag: str | None = None,
                          transport_factory: Callable[..., Transport] = Transport) -> ShareResult:
    """Upload `key` to the configured backend (see the module doc). Failures warn and return `failed`: the app
    runs either way, and `train --type rl` shares the key again before creating a job."""
    from synth_ai.client.connect import api_key_for
    from synth_ai.env.backend_url import resolve_backend

    if not key:
        return ShareResult("skipped", "no ENVIRONMENT_API_KEY to share")
    where = "the backend"
    try:
        backend = resolve_backend(backend_flag)
        if backend.embedded and backend.source == "embedded default":
            from synth_ai.backend.daemon import find_local_backend

            found = find_local_backend()
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
