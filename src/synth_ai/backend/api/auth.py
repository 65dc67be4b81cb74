"""Bearer-key checks for the embedded backend's API: the keys in `<data dir>/backend_keys.json`
(`synth_ai.env.backend_keys`), re-read when the file changes so a key added while the server runs counts at once."""

from __future__ import annotations

import hmac
import threading
from pathlib import Path

from synth_ai.env.backend_keys import accepted_keys, keys_path


class KeyChecker:
    """Checks bearer tokens against the key file, re-reading it when its mtime or size changes."""

    def __init__(self, data_dir: Path) -> None:
        self.path = keys_path(data_dir)
        self._stamp: tuple[float, int] | None = None
        self._keys: list[bytes] = []
        self._lock = threading.Lock()

    def _current(self) -> list[bytes]:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime, st.st_size)
        except FileNotFoundError:
            stamp = None
        with self._lock:
            if stamp != self._stamp:
                self._keys = [k.encode() for k in accepted_keys(self.path.parent)] if stamp else []
                self._stamp = stamp
            return self._keys

    def check(self, token: str | None) -> bool:
        if not token:
            return False
        candidate = token.encode()
        ok = False
        for key in self._current():
            ok |= hmac.compare_digest(candidate, key)  # no early exit: time does not depend on which key matched
        return ok


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None
