"""The embedded backend of this machine, seen from the commands that use it: find it, start it (saying where it
listens), stop it when this command started it for nothing, and open the API on the backend a command targets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from synth_ai.client.connect import connect
from synth_ai.client.resources import SynthAPI
from synth_ai.client.transport import Transport
from synth_ai.env.backend_url import EMBEDDED_HOST, BackendTarget, ensure_api_base


def start_embedded_backend(settings: Any, say: Callable[[str], None], *,
                           timeout: float | None = None) -> dict[str, Any]:
    """Start the backend `settings` describe in the background, or find it already running; returns the daemon's
    status document (`already_running` True when it was). When its usual port was taken, says where it went."""
    from synth_ai.backend import daemon

    state = daemon.start(settings) if timeout is None else daemon.start(settings, timeout=timeout)
    if state.get("port_taken"):
        say(daemon.moved_notice(state))
    return state


def running_embedded_backend() -> dict[str, Any] | None:
    """`{url, api_base, api_key, pid}` of the embedded backend running on this machine's data dir; None when none
    runs. Never starts one."""
    from synth_ai.backend.daemon import find_local_backend

    return find_local_backend()


def locate_embedded(backend: BackendTarget, say: Callable[[str], None], *, autostart: bool) -> BackendTarget:
    """Where the embedded backend of this machine listens; started in the background when none runs and
    `autostart` allows it."""
    from synth_ai.backend.server_settings import BackendSettings

    found = running_embedded_backend()
    if found is not None:
        return BackendTarget(found["api_base"], backend.source, True)
    if not autostart:
        return backend
    settings = BackendSettings.load(host=EMBEDDED_HOST)
    where = f"{EMBEDDED_HOST}:{settings.port}" + ("" if settings.port_fixed else " if it is free")
    say(f"No backend answers; starting the embedded backend on {where} (stop it with `synth-ai backend stop`).")
    state = start_embedded_backend(settings, say)
    return BackendTarget(state.get("api_base") or ensure_api_base(str(state["url"])), backend.source, True,
                         started_here=not state.get("already_running"))


def stop_embedded_backend() -> bool:
    """Stop the embedded backend of this machine's data dir; True when one was running and stopped."""
    from synth_ai.backend import daemon
    from synth_ai.env.paths import data_dir

    return bool(daemon.stop(data_dir(create=False)).get("stopped"))


def stop_started_backend(backend: BackendTarget, say: Callable[[str], None]) -> None:
    """Stop the embedded backend that this command started (`started_here`), e.g. when it cannot be used."""
    if not (backend.embedded and backend.started_here):
        return
    if stop_embedded_backend():
        say("Stopped the embedded backend this command had started.")


def open_api(backend: BackendTarget, *, say: Callable[[str], None], autostart: bool = True,
             transport_factory: Callable[..., Transport] = Transport) -> tuple[SynthAPI, BackendTarget]:
    """The API for `backend`. For the embedded default, the running local backend is found (or started)."""
    if backend.embedded and backend.source == "embedded default":
        backend = locate_embedded(backend, say, autostart=autostart)
    return connect(backend, transport_factory=transport_factory), backend
