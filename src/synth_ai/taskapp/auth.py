"""Task-app API-key rules, exactly as synth-ai 0.2.17 applies them (reference §5.2), minus its key echo.

- Allowed keys: `ENVIRONMENT_API_KEY` (when empty, taken from `dev_environment_api_key`, then
  `DEV_ENVIRONMENT_API_KEY`) plus the comma-separated `ENVIRONMENT_API_KEY_ALIASES`.
- Presented keys: every `X-API-Key` header, `X-API-Keys`, and the `Authorization: Bearer` token, each split on
  commas and trimmed.
- No allowed key configured → 503 `missing_environment_api_key`; no presented key matches → 400 `unauthorised`.
  The 400 body keeps the reference's fields (`allowed_first15`, `allowed_count`, `got_first15`, `got_lens`) but
  every key in it is masked with `mask_secret`, so an error body never hands out a usable key.
- Keys are compared with `hmac.compare_digest`, and every pair is compared, so timing does not reveal a match.
"""

from __future__ import annotations

import hmac
import os
import sys
from collections.abc import Iterable, Mapping

from synth_ai.env.secrets import mask_secret
from synth_ai.taskapp.errors import TaskAppError

ENV_KEY = "ENVIRONMENT_API_KEY"
ENV_KEY_FALLBACKS: tuple[str, ...] = ("dev_environment_api_key", "DEV_ENVIRONMENT_API_KEY")
ENV_KEY_ALIASES = "ENVIRONMENT_API_KEY_ALIASES"
VENDOR_KEY_FALLBACKS: dict[str, tuple[str, ...]] = {
    "OPENAI_API_KEY": ("dev_openai_api_key", "DEV_OPENAI_API_KEY"),
    "GROQ_API_KEY": ("dev_groq_api_key", "DEV_GROQ_API_KEY"),
}


def _split_csv(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def primary_environment_api_key(environ: Mapping[str, str] | None = None) -> str | None:
    """`ENVIRONMENT_API_KEY`, or the first non-empty dev fallback."""
    env = os.environ if environ is None else environ
    for name in (ENV_KEY, *ENV_KEY_FALLBACKS):
        value = (env.get(name) or "").strip()
        if value:
            return value
    return None


def allowed_environment_api_keys(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every key a caller may present, primary first, without duplicates."""
    env = os.environ if environ is None else environ
    keys: list[str] = []
    primary = primary_environment_api_key(env)
    if primary:
        keys.append(primary)
    for alias in _split_csv(env.get(ENV_KEY_ALIASES)):
        if alias not in keys:
            keys.append(alias)
    return keys


def normalize_environment_api_key(*, log: bool = True) -> str | None:
    """Copy a dev fallback into `ENVIRONMENT_API_KEY` when it is empty (and the vendor keys likewise), as the
    reference does at app start-up. Returns the primary key."""
    if not (os.environ.get(ENV_KEY) or "").strip():
        for name in ENV_KEY_FALLBACKS:
            value = (os.environ.get(name) or "").strip()
            if value:
                os.environ[ENV_KEY] = value
                if log:
                    print(f"[task:auth] {ENV_KEY} set from {name} (prefix={mask_secret(value)})", file=sys.stderr)
                break
    for target, fallbacks in VENDOR_KEY_FALLBACKS.items():
        if not (os.environ.get(target) or "").strip():
            for name in fallbacks:
                value = (os.environ.get(name) or "").strip()
                if value:
                    os.environ[target] = value
                    break
    return primary_environment_api_key()


def presented_keys(
    x_api_key: Iterable[str] = (), x_api_keys: Iterable[str] = (), authorization: Iterable[str] = ()
) -> list[str]:
    """The candidate keys of a request, from its header values (each header may repeat)."""
    keys: list[str] = []
    for value in x_api_key:
        keys.extend(_split_csv(value))
    for value in x_api_keys:
        keys.extend(_split_csv(value))
    for value in authorization:
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() == "bearer":
            keys.extend(_split_csv(token))
    return keys


def keys_match(candidates: Iterable[str], allowed: Iterable[str]) -> bool:
    """True when any candidate equals any allowed key; compares every pair in constant time."""
    allowed_bytes = [a.encode("utf-8") for a in allowed]
    matched = False
    for candidate in candidates:
        cand = candidate.encode("utf-8")
        for key in allowed_bytes:
            matched |= hmac.compare_digest(cand, key)
    return matched


def check_api_key(candidates: list[str], environ: Mapping[str, str] | None = None) -> None:
    """Raise the reference's 503/400 errors unless one of `candidates` is allowed."""
    allowed = allowed_environment_api_keys(environ)
    if not allowed:
        raise TaskAppError(
            f"{ENV_KEY} is not configured",
            status_code=503,
            code="missing_environment_api_key",
        )
    if keys_match(candidates, allowed):
        return
    raise TaskAppError(
        "API key missing or invalid",
        status_code=400,
        code="unauthorised",
        allowed_first15=[mask_secret(k) for k in allowed],
        allowed_count=len(allowed),
        got_first15=[mask_secret(k) for k in candidates],
        got_lens=[len(k) for k in candidates],
    )


def auth_headers(api_key: str, aliases: Iterable[str] = ()) -> dict[str, str]:
    """Headers a client sends to a task app: `X-API-Key`, `X-API-Keys` (key + aliases) and Bearer."""
    keys = [api_key, *[a for a in aliases if a and a != api_key]]
    return {"X-API-Key": api_key, "X-API-Keys": ",".join(keys), "Authorization": f"Bearer {api_key}"}
