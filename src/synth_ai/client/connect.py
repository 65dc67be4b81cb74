"""Opening the API on a resolved backend: which key to send.

For the embedded backend the key is the one it created for this machine (`~/.synth-ai/backend_keys.json`), falling
back to `SYNTH_API_KEY`: a hosted key in the user's `.env` would only be refused by the local server. For every
other backend it is `SYNTH_API_KEY`. Finding or starting the embedded backend is not the client's work: the flows
do it (`synth_ai.connect.embedded_backend`) and hand the client the backend to talk to.
"""

from __future__ import annotations

from collections.abc import Callable

from synth_ai.client.resources import SynthAPI
from synth_ai.client.transport import Transport
from synth_ai.env.backend_url import BackendTarget
from synth_ai.env.dotenv_files import get_env
from synth_ai.errors import AuthError


def embedded_key() -> str | None:
    from synth_ai.env.backend_keys import default_key

    return default_key()


def api_key_for(backend: BackendTarget) -> str | None:
    if backend.embedded:
        return embedded_key() or get_env("SYNTH_API_KEY")
    return get_env("SYNTH_API_KEY")


def connect(backend: BackendTarget, *, transport_factory: Callable[..., Transport] = Transport) -> SynthAPI:
    """The API of `backend`, as it is (no backend is looked for or started here), with the key it takes."""
    key = api_key_for(backend)
    if not key:
        raise AuthError(f"No API key for {backend.api_base}.",
                        hint="Run `synth-ai setup` (hosted) or `synth-ai setup --local` (embedded backend), "
                             "or set SYNTH_API_KEY.")
    return SynthAPI(transport_factory(backend.api_base, key, embedded=backend.embedded))
