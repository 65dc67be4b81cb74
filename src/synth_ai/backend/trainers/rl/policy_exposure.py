"""Where the task app reaches the policy being trained.

On one machine the task app calls the policy server's loopback URL. When the job runs in a Modal container (the
modal executor's job function sets TUNNEL_ENV=modal), the task app is elsewhere (`synth-ai deploy`, or any public
URL), so the policy server listens on all interfaces and its port is forwarded through a Modal tunnel
(`modal.forward`: a public HTTPS URL to the container). A tunnel is public, so the URL carries a random path token
that the server requires (`/p/<token>/v1/chat/completions`): only those given the URL, in a rollout request, can
call the policy. TUNNEL_ENV=token does the same without the tunnel (the server's own address), which is how the
token path is tested on a machine without Modal.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from synth_ai.backend.inference.rollout_engine import RolloutEngine

TUNNEL_ENV = "SYNTH_AI_POLICY_TUNNEL"
PATH = "/v1/chat/completions"

_open_tunnels = contextlib.ExitStack()
atexit.register(_open_tunnels.close)  # a tunnel lives as long as the job's process


def _modal_forward(port: int) -> str:
    import modal

    tunnel = _open_tunnels.enter_context(modal.forward(port))
    return str(tunnel.url)


def reach_policy_through_modal_tunnel() -> None:
    """In a Modal container (the RL kind's `remote_setup`): the task app is elsewhere, so the policy it calls is
    served through a Modal tunnel, unless the environment already says how."""
    os.environ.setdefault(TUNNEL_ENV, "modal")


def policy_url(engine: RolloutEngine, *, forward: Callable[[int], str] | None = None) -> str:
    """Start `engine` (a policy server) and return the chat-completions URL the task app should be given."""
    mode = os.environ.get(TUNNEL_ENV, "").strip().lower()
    if mode not in {"modal", "token"}:
        return engine.start()
    engine.path_token = secrets.token_urlsafe(24)
    engine.bind_host = "0.0.0.0"  # noqa: S104 - the tunnel connects to the container's interface
    local = urlsplit(engine.start())
    if mode == "token":
        base = f"http://127.0.0.1:{local.port}"
    else:
        base = (forward or _modal_forward)(int(local.port)).rstrip("/")
    return f"{base}/p/{engine.path_token}{PATH}"
