"""`/api/v1/crypto/public-key`, `/api/v1/env-keys` and `/api/v1/env-keys/verify`: how clients (`serve`, `deploy`,
`train`, and synth-ai 0.2.17's preflight) hand the backend the ENVIRONMENT_API_KEY of their task app, sealed.

An upload is stored with the keys `setup --local` registers (`env/backend_keys.py`), so the verify route, the create
probe and the RL worker all find it. Answers never carry the key, not even masked.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request

from synth_ai.backend.api.state import get_backend
from synth_ai.backend.http_errors import ApiError
from synth_ai.backend.store import sealed_keys
from synth_ai.env.backend_keys import ENV_KEY_NAMES, UPLOADED, register_environment_key, stored_environment_keys

router = APIRouter(tags=["env-keys"])

_NAMES = {name.upper(): "ENVIRONMENT_API_KEY" if name.upper() == "DEV_ENVIRONMENT_API_KEY" else name.upper()
          for name in ENV_KEY_NAMES}


@router.get("/v1/crypto/public-key")
def public_key(request: Request) -> dict[str, Any]:
    data_dir = get_backend(request).settings.data_dir
    return {"public_key": sealed_keys.public_key_b64(data_dir), "alg": sealed_keys.ALG}


def _name(raw: Any) -> str:
    if raw is None:
        return "ENVIRONMENT_API_KEY"
    if not isinstance(raw, str) or raw.strip().upper() not in _NAMES:
        raise ApiError(400, "invalid_request", f"name must be ENVIRONMENT_API_KEY (found {raw!r}).",
                       hint='Send {"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": "..."}.')
    return _NAMES[raw.strip().upper()]


@router.post("/v1/env-keys")
def upload_env_key(request: Request, body: Any = Body(...)) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request", "The body must be a JSON object with name and ciphertext_b64.")
    name = _name(body.get("name"))
    data_dir = get_backend(request).settings.data_dir
    key = sealed_keys.open_sealed(data_dir, body.get("ciphertext_b64"))
    entry = register_environment_key(key, name=name, source=UPLOADED, data_dir=data_dir)
    return {"id": entry.get("id"), "name": name, "stored": True, "updated_at": entry.get("updated_at")}


@router.get("/v1/env-keys/verify")
def verify_env_key(request: Request, name: str | None = None) -> dict[str, Any]:
    wanted = _name(name)
    entries = [e for e in stored_environment_keys(get_backend(request).settings.data_dir)
               if _NAMES.get(str(e.get("name", "")).upper()) == wanted]
    latest = max((str(e.get("updated_at") or e.get("created_at") or "") for e in entries), default=None)
    return {"present": bool(entries), "name": wanted, "count": len(entries), "updated_at": latest,
            "uploaded": any(e.get("source") == UPLOADED for e in entries)}
