"""The embedded backend's key functions under the path the docs named before the backend's redesign (issue 24).

They live in `synth_ai.env.backend_keys` now, below the backend, because the client, `setup` and task apps read the
same key files (the API's bearer-key check is `synth_ai.backend.api.auth`). New code imports them from there.
"""

from synth_ai.env.backend_keys import (
    ENV_KEY_NAMES,
    KnownKey,
    accepted_keys,
    create_key,
    default_key,
    ensure_keys,
    environment_keys,
    keys_path,
    known_environment_keys,
    register_environment_key,
    stored_environment_keys,
)

__all__ = ["ENV_KEY_NAMES", "KnownKey", "accepted_keys", "create_key", "default_key", "ensure_keys", "environment_keys",
           "keys_path", "known_environment_keys", "register_environment_key", "stored_environment_keys"]
