"""Browser login for the dashboard: one-time login tokens traded for an HttpOnly cookie holding the API key.

`synth-ai backend open` asks `POST /api/dashboard/login-token` (with its bearer key) for a token and prints
`<url>/login?token=…`. The token is random (never the key), kept only as its sha256 in this process's memory,
valid for `DEFAULT_TTL_S` and good for one redemption; redeeming it sets the cookie to the key that asked for it,
so a key removed from `backend_keys.json` logs its browsers out too.

A cookie alone does not authenticate an API request: the request must also carry `X-Synth-Dashboard: 1`, a header
a cross-site form or image cannot send (and a cross-site script cannot without a CORS preflight this server never
grants), on top of `SameSite=Strict`.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time

COOKIE = "synth_dashboard"
HEADER = "X-Synth-Dashboard"
DEFAULT_TTL_S = 120
MAX_TTL_S = 600
MAX_PENDING = 64  # tokens waiting to be redeemed; the oldest go first past this


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class LoginTokens:
    """Pending one-time tokens: sha256(token) -> (key, expires at on the monotonic clock)."""

    def __init__(self) -> None:
        self._pending: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def issue(self, key: str, ttl_s: float = DEFAULT_TTL_S) -> str:
        token = "login_" + secrets.token_urlsafe(24)
        now = time.monotonic()
        with self._lock:
            self._drop_expired(now)
            while len(self._pending) >= MAX_PENDING:
                self._pending.pop(next(iter(self._pending)))
            self._pending[_digest(token)] = (key, now + ttl_s)
        return token

    def redeem(self, token: str | None) -> str | None:
        """The key the token was issued for, once; None for an unknown, used or expired token."""
        if not token:
            return None
        with self._lock:
            entry = self._pending.pop(_digest(token), None)
        if entry is None or entry[1] < time.monotonic():
            return None
        return entry[0]

    def _drop_expired(self, now: float) -> None:
        for digest in [d for d, (_, expires) in self._pending.items() if expires < now]:
            del self._pending[digest]


def cookie_key(cookies: dict[str, str], headers: dict[str, str] | object) -> str | None:
    """The key in the dashboard cookie when the request also carries the dashboard header, else None."""
    if not getattr(headers, "get", None) or headers.get(HEADER) != "1":  # type: ignore[union-attr]
        return None
    return cookies.get(COOKIE) or None
