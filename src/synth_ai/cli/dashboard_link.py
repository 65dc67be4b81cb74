"""`synth-ai backend open`: a one-time dashboard login link from the backend running on this machine.

The link carries a short-lived token the backend issued for this machine's API key, never the key itself
(`synth_ai.backend.api.dashboard_auth`); the browser trades it for an HttpOnly cookie.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def login_link(data_dir=None) -> dict[str, Any]:
    """`{url, expires_in, backend}` for the running local backend; UnavailableError when none runs."""
    from synth_ai.backend.daemon import find_local_backend
    from synth_ai.client.transport import Transport
    from synth_ai.env.dotenv_files import get_env
    from synth_ai.errors import AuthError, UnavailableError

    found = find_local_backend(data_dir)
    if found is None:
        raise UnavailableError("No backend is running on this machine.",
                               hint="Start it with `synth-ai backend start` (or `synth-ai backend serve`), "
                                    "then run `synth-ai backend open` again.")
    key = found.get("api_key") or get_env("SYNTH_API_KEY")
    if not key:
        raise AuthError(f"No API key for the backend at {found['url']}.",
                        hint="Its keys are in <data dir>/backend_keys.json; `synth-ai setup --local` writes one.")
    with Transport(found["api_base"], key) as transport:
        doc = transport.post_json("/dashboard/login-token", {})
    return {"url": doc["url"], "expires_in": doc["expires_in"], "backend": found["url"]}


def open_in_browser(url: str) -> bool:
    """Open `url` in a graphical browser when this session has one; False otherwise (e.g. over SSH, where a
    text-mode browser would take over the terminal)."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    import webbrowser

    try:
        return bool(webbrowser.open(url, new=2))
    except webbrowser.Error:
        return False
