"""The backend's sealed-box key pair: clients encrypt an ENVIRONMENT_API_KEY to its public key so the key travels
(and sits in proxies' logs) only as ciphertext, as synth-ai 0.2.17's env-key preflight does.

`<data dir>/env_key_box.json` (0600) holds the X25519 key pair, created on first use:

    {"alg": "libsodium.sealedbox.v1", "private_key_b64": "…", "public_key_b64": "…", "created_at": "…"}

PyNaCl is imported only here and only when a request needs it, so the rest of the backend (and `--help`) never
loads it. Decrypted values are returned to the caller and never logged.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from pathlib import Path
from typing import Any

from synth_ai.backend.http_errors import ApiError
from synth_ai.fsutil import write_secret_file

ALG = "libsodium.sealedbox.v1"
BOX_FILE = "env_key_box.json"
MAX_PLAINTEXT_BYTES = 8 * 1024  # the reference helper's limit
SEAL_OVERHEAD = 48  # ephemeral public key (32) + MAC (16)

_lock = threading.Lock()


def _nacl() -> Any:
    try:
        import nacl.public
    except ImportError:
        raise ApiError(501, "crypto_unavailable", "This backend cannot open sealed boxes: PyNaCl is not installed.",
                       hint="pip install pynacl (a dependency of synth-ai) and restart the backend.") from None
    return nacl.public


def box_path(data_dir: Path) -> Path:
    return Path(data_dir) / BOX_FILE


def _load_or_create(data_dir: Path) -> tuple[Any, str]:
    """The private key object and the public key (base64)."""
    public = _nacl()
    path = box_path(data_dir)
    with _lock:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            private = public.PrivateKey(base64.b64decode(doc["private_key_b64"], validate=True))
            return private, base64.b64encode(bytes(private.public_key)).decode("ascii")
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise ApiError(500, "crypto_key_unreadable",
                           f"{path}: the backend's sealed-box key file is unreadable ({type(exc).__name__}).",
                           hint=f"Delete {path} and restart the backend (clients then upload their keys again).") \
                from None
        from synth_ai.backend.store.db import utcnow

        private = public.PrivateKey.generate()
        public_b64 = base64.b64encode(bytes(private.public_key)).decode("ascii")
        write_secret_file(path, json.dumps({
            "alg": ALG, "private_key_b64": base64.b64encode(bytes(private)).decode("ascii"),
            "public_key_b64": public_b64, "created_at": utcnow()}, indent=2) + "\n")
        return private, public_b64


def public_key_b64(data_dir: Path) -> str:
    return _load_or_create(data_dir)[1]


def open_sealed(data_dir: Path, ciphertext_b64: Any) -> str:
    """The plaintext of a sealed box addressed to this backend; 400 with the reason when it is not one."""
    if not isinstance(ciphertext_b64, str) or not ciphertext_b64.strip():
        raise ApiError(400, "invalid_request", "ciphertext_b64 must be a non-empty base64 string.",
                       hint="Encrypt the key with a libsodium sealed box to GET /api/v1/crypto/public-key.")
    limit = (MAX_PLAINTEXT_BYTES + SEAL_OVERHEAD) * 4 // 3 + 4
    if len(ciphertext_b64) > limit:
        raise ApiError(413, "payload_too_large",
                       f"ciphertext_b64 is {len(ciphertext_b64)} characters; a sealed key of at most "
                       f"{MAX_PLAINTEXT_BYTES} bytes is at most {limit}.")
    try:
        sealed = base64.b64decode(ciphertext_b64.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "invalid_request", "ciphertext_b64 is not valid base64.") from None
    private, _ = _load_or_create(data_dir)
    public = _nacl()
    try:
        plain = public.SealedBox(private).decrypt(sealed)
    except Exception:  # noqa: BLE001 - nacl raises CryptoError/ValueError/TypeError for a box it cannot open
        raise ApiError(400, "undecryptable",
                       "ciphertext_b64 does not open with this backend's key: it was sealed to another public key "
                       "or is damaged.",
                       hint="Fetch GET /api/v1/crypto/public-key from this backend again and re-encrypt.") from None
    try:
        text = plain.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "invalid_key", "The sealed key is not UTF-8 text.") from None
    if not text.strip() or text != text.strip() or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ApiError(400, "invalid_key",
                       "The sealed key is empty or has whitespace or control characters (it must fit in an "
                       "X-API-Key header).", hint="Check the ENVIRONMENT_API_KEY value in your .env.")
    return text
