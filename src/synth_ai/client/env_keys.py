"""Handing the backend a task app's ENVIRONMENT_API_KEY, sealed to the backend's public key (libsodium sealed box,
as synth-ai 0.2.17's preflight did): `GET /v1/crypto/public-key` → `POST /v1/env-keys` → `GET /v1/env-keys/verify`.

These are the routes of one given backend. The preflight that picks the backend and shares the key (`serve`,
`deploy`, `modal-serve`) is a flow: `synth_ai.connect.env_key_share`. The key never appears in output; PyNaCl is
imported only when sealing.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from synth_ai.client.transport import Transport
from synth_ai.errors import InvalidInputError, UnavailableError

ALG = "libsodium.sealedbox.v1"
MAX_KEY_BYTES = 8 * 1024


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
