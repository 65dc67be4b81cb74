"""Which addresses expose a server beyond this machine, and the rule for them: no key, no start.

On a loopback address (127.0.0.0/8, ::1, localhost) only local processes can connect, so the embedded backend
creates its first key itself and a task app may be started with key checks off. On any other address (0.0.0.0, a
LAN or public IP, a hostname) the server is reachable by others, so it starts only when a key already guards it.
"""

from __future__ import annotations

import ipaddress

from synth_ai.errors import AuthError

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    text = (host or "").strip().strip("[]").lower()
    if text in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False  # a hostname may resolve anywhere: treat it as exposed


def refuse_unguarded(host: str, port: int, what: str, *, guarded: bool, fix: str) -> None:
    """Raise AuthError (exit 4) when `what` would listen beyond this machine without a key guarding it."""
    if guarded or is_loopback(host):
        return
    raise AuthError(f"Refusing to start {what} on {host}:{port} without a key: that address is reachable from "
                    "other machines, and nothing would stop them from using it.",
                    hint=f"{fix} Or bind to 127.0.0.1 to keep it on this machine.",
                    details={"host": host, "port": port})
