"""The resolved config as it may leave the machine for a tracker: every value under a secret-sounding key masked,
every known secret value scrubbed from strings, and credentials in URLs (`https://user:pass@host`) dropped."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from synth_ai.env.secrets import is_secret_name, mask_secret, redact, secret_values


def public_config(config: Any, secrets: list[str] | None = None) -> Any:
    known = secret_values() if secrets is None else secrets
    return _clean(config, known)


def _clean(value: Any, known: list[str]) -> Any:
    if isinstance(value, dict):
        return {str(k): (mask_secret(str(v)) if is_secret_name(str(k)) and isinstance(v, str) and v
                         else _clean(v, known)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v, known) for v in value]
    if isinstance(value, str):
        return redact(_without_userinfo(value), known)
    return value


def _without_userinfo(text: str) -> str:
    if "@" not in text or "://" not in text:
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    if not parts.password:
        return text
    host = parts.hostname or ""
    netloc = f"{parts.username}:****@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
