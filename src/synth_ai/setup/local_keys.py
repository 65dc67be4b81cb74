"""Keys for `synth-ai setup --local`: one the embedded backend accepts (SYNTH_API_KEY, `sk_local_…`) and one for
task apps (ENVIRONMENT_API_KEY, 64 hex characters as synth-ai 0.2.17 minted them).

Keys already saved in the `.env` file or `config.json` are reused, so re-running setup changes nothing. Planning
(`plan_local_keys`) only reads; `register_local_keys` then records the keys with the embedded backend
(`backend_keys.json`, `env_keys.json` in the data dir). The flow writes the user's files between the two, so an
interrupted run leaves at worst a saved key the backend does not know yet, which the next run registers.
A running backend re-reads its key file, so a key registered while it runs is accepted at once.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from synth_ai.env import backend_keys as auth
from synth_ai.env.secrets import mask_secret
from synth_ai.errors import InvalidInputError

KEY_LABEL = "synth-ai setup --local"
SOURCES = {"env_file": ".env file", "config": "config.json"}


@dataclass(frozen=True)
class LocalKey:
    name: str  # SYNTH_API_KEY or ENVIRONMENT_API_KEY
    value: str = field(repr=False)
    action: str  # "reused" (already saved and registered), "registered" (saved, now registered), "created"
    registered: bool  # whether the backend already knows it

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "value": mask_secret(self.value), "action": self.action}


@dataclass(frozen=True)
class LocalKeys:
    synth: LocalKey
    environment: LocalKey

    def values(self) -> dict[str, str]:
        return {self.synth.name: self.synth.value, self.environment.name: self.environment.value}


class ForeignKeyError(InvalidInputError):
    """A saved SYNTH_API_KEY that the embedded backend does not know and did not make (a hosted key, most likely)."""

    def __init__(self, found: list[tuple[str, str]]) -> None:
        where = ", ".join(f"{label} ({mask_secret(value)})" for label, value in found)
        super().__init__(
            f"SYNTH_API_KEY in {where} is not a key of the embedded backend (a hosted Synth key?); "
            "`setup --local` would replace it.",
            hint="Pass --force to replace it with a local key (run `synth-ai setup` again later to get a hosted "
                 "key back), or keep it and let `synth-ai train` use the embedded backend's own key.")
        self.found = found


def plan_local_keys(existing: dict[str, dict[str, str]], *, labels: dict[str, str] | None = None,
                    replace_foreign: bool = False, data_dir: Path | None = None) -> LocalKeys:
    """Choose the two keys: saved ones when usable, new ones otherwise. Reads the backend's key files only.

    `existing` is `credentials.existing_keys(...)`: `{"env_file": {...}, "config": {...}}`."""
    labels = {**SOURCES, **(labels or {})}
    accepted = set(auth.accepted_keys(data_dir))
    saved = [(src, existing.get(src, {}).get("SYNTH_API_KEY")) for src in ("env_file", "config")]
    saved = [(src, v) for src, v in saved if v]
    chosen = (next((v for _, v in saved if v in accepted), None)
              or next((v for _, v in saved if v.startswith(auth.KEY_PREFIX)), None))
    foreign = [(labels[src], v) for src, v in saved if v != chosen and v not in accepted
               and not v.startswith(auth.KEY_PREFIX)]
    if foreign and not replace_foreign:
        raise ForeignKeyError(foreign)
    if chosen is None:
        synth = LocalKey("SYNTH_API_KEY", auth.new_key(), "created", registered=False)
    elif chosen in accepted:
        synth = LocalKey("SYNTH_API_KEY", chosen, "reused", registered=True)
    else:
        synth = LocalKey("SYNTH_API_KEY", chosen, "registered", registered=False)

    registered_env = set(auth.environment_keys(data_dir, environ={}))
    env_saved = [v for v in (existing.get(src, {}).get("ENVIRONMENT_API_KEY") for src in ("env_file", "config")) if v]
    if not env_saved:
        environment = LocalKey("ENVIRONMENT_API_KEY", secrets.token_hex(32), "created", registered=False)
    elif env_saved[0] in registered_env:
        environment = LocalKey("ENVIRONMENT_API_KEY", env_saved[0], "reused", registered=True)
    else:
        environment = LocalKey("ENVIRONMENT_API_KEY", env_saved[0], "registered", registered=False)
    return LocalKeys(synth, environment)


def register_local_keys(keys: LocalKeys, *, data_dir: Path | None = None) -> None:
    """Make the embedded backend accept `keys.synth` and know `keys.environment` (no-op for known keys)."""
    if not keys.synth.registered:
        auth.create_key(KEY_LABEL, key=keys.synth.value, data_dir=data_dir)
    if not keys.environment.registered:
        auth.register_environment_key(keys.environment.value, name="ENVIRONMENT_API_KEY", data_dir=data_dir)
