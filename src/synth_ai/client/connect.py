"""Opening the API for a resolved backend: which key to send, and starting the embedded backend when it is the
target and nothing answers.

For the embedded backend the key is the one it created for this machine (`~/.synth-ai/backend_keys.json`), falling
back to `SYNTH_API_KEY`: a hosted key in the user's `.env` would only be refused by the local server. For every
other backend it is `SYNTH_API_KEY`.
"""

from __future__ import annotations

from collections.abc import Callable

from synth_ai.client.resources import SynthAPI
from synth_ai.client.transport import Transport
from synth_ai.env.backend_url import EMBEDDED_HOST, BackendTarget, ensure_api_base
from synth_ai.env.dotenv_files import get_env
from synth_ai.errors import AuthError


def embedded_key() -> str | None:
    from synth_ai.env.backend_keys import default_key

    return default_key()


def api_key_for(backend: BackendTarget) -> str | None:
    if backend.embedded:
        return embedded_key() or get_env("SYNTH_API_KEY")
    return get_env("SYNTH_API_KEY")


def locate_embedded(backend: BackendTarget, say: Callable[[str], None], *, autostart: bool) -> BackendTarget:
    """Where the embedded backend of this machine listens; started in the background when none runs and
    `autostart` allows it."""
    from synth_ai.backend import daemon
    from synth_ai.backend.server_settings import BackendSettings

    found = daemon.find_local_backend()
    if found is not None:
        return BackendTarget(found["api_base"], backend.source, True)
    if not autostart:
        return backend
    settings = BackendSettings.load(host=EMBEDDED_HOST)
    where = f"{EMBEDDED_HOST}:{settings.port}" + ("" if settings.port_fixed else " if it is free")
    say(f"No backend answers; starting the embedded backend on {where} (stop it with `synth-ai backend stop`).")
    state = daemon.start(settings)
    if state.get("port_taken"):
        say(daemon.moved_notice(state))
    return BackendTarget(state.get("api_base") or ensure_api_base(str(state["url"])), backend.source, True,
                         started_here=not state.get("already_running"))


def stop_started_backend(backend: BackendTarget, say: Callable[[str], None]) -> None:
    """Stop the embedded backend that this command started (`started_here`), e.g. when it cannot be used."""
    from synth_ai.backend import daemon
    from synth_ai.env.paths import data_dir

    if not (backend.embedded and backend.started_here):
        return
    if daemon.stop(data_dir(create=False)).get("stopped"):
        say("Stopped the embedded backend this command had started.")


def open_api(backend: BackendTarget, *, say: Callable[[str], None], autostart: bool = True,
             transport_factory: Callable[..., Transport] = Transport) -> tuple[SynthAPI, BackendTarget]:
    """The API for `backend`. For the embedded default, the running local backend is found (or started)."""
    if backend.embedded and backend.source == "embedded default":
        backend = locate_embedded(backend, say, autostart=autostart)
    key = api_key_for(backend)
    if not key:
        raise AuthError(f"No API key for {backend.api_base}.",
                        hint="Run `synth-ai setup` (hosted) or `synth-ai setup --local` (embedded backend), "
                             "or set SYNTH_API_KEY.")
    return SynthAPI(transport_factory(backend.api_base, key, embedded=backend.embedded)), backend
