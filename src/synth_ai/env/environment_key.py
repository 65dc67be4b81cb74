"""Which ENVIRONMENT_API_KEY a command uses: one resolver for every command that serves, checks or calls a task app
(`serve`, `task-app validate|info`, `eval`, `deploy`, `modal-serve`, `train --type rl`), so a key `synth-ai setup`
saved works in all of them without exporting anything.

Sources, the first that has a key wins:

1. the process environment: `ENVIRONMENT_API_KEY`, then its fallbacks `dev_environment_api_key`,
   `DEV_ENVIRONMENT_API_KEY` (what the command loaded from its env files is in the environment by then);
2. the command's env files: its `--env-file`s (the first file first), else the nearest `.env` walking up from the
   working directory: the `./.env` that `setup` writes;
3. `<data dir>/config.json`, where `setup` also saves the key, so a command run from another folder finds it.

`ENVIRONMENT_API_KEY_ALIASES` (comma-separated) names more keys to present beside it, read from the same places.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from synth_ai.env.dotenv_files import ALIASES, find_nearest_env, read_env_file, saved_credentials

ENV_KEY = "ENVIRONMENT_API_KEY"
KEY_NAMES: tuple[str, ...] = (ENV_KEY, *ALIASES[ENV_KEY])  # the name, then the dev fallbacks, in 0.2.17's order
ALIASES_NAME = "ENVIRONMENT_API_KEY_ALIASES"


@dataclass(frozen=True)
class EnvironmentKey:
    value: str
    source: str  # where it was found, for messages: "the environment", a .env path, the config.json path
    aliases: tuple[str, ...] = ()  # more keys to present (ENVIRONMENT_API_KEY_ALIASES), the value left out


def _first_key(values: Mapping[str, str]) -> str | None:
    return next((values[name].strip() for name in KEY_NAMES if (values.get(name) or "").strip()), None)


def _sources(env_files: Iterable[str | Path] | None) -> Iterator[tuple[str, Mapping[str, str]]]:
    """(label, values) for each place, in the order they are tried; a file is read only when it is reached."""
    from synth_ai.env.paths import data_dir

    yield "the environment", os.environ
    files = [Path(p).expanduser() for p in env_files] if env_files else [find_nearest_env()]
    for path in files:
        if path is not None and path.is_file():
            yield str(path), read_env_file(path)
    yield str(data_dir(create=False) / "config.json"), saved_credentials()


def resolve_environment_key(env_files: Iterable[str | Path] | None = None) -> EnvironmentKey | None:
    """The key this command presents or serves with (see the module doc); None when no source has one.
    `env_files`: the command's `--env-file`s; None or empty: the nearest `.env`."""
    aliases: list[str] = []
    chosen: tuple[str, str] | None = None
    for label, values in _sources(env_files):
        if not aliases:
            aliases = [a.strip() for a in (values.get(ALIASES_NAME) or "").split(",") if a.strip()]
        if chosen is None and (value := _first_key(values)) is not None:
            chosen = (value, label)
        if chosen is not None and aliases:
            break
    if chosen is None:
        return None
    value, label = chosen
    return EnvironmentKey(value, label, tuple(dict.fromkeys(a for a in aliases if a != value)))


def adopt_environment_key(env_files: Iterable[str | Path] | None = None) -> EnvironmentKey | None:
    """`resolve_environment_key`, and when the key came from a file, set it as this process's ENVIRONMENT_API_KEY
    (never written anywhere) so a task app served or started here accepts the key its callers present."""
    key = resolve_environment_key(env_files)
    if key is not None and _first_key(os.environ) is None:
        os.environ[ENV_KEY] = key.value
        if key.aliases and not (os.environ.get(ALIASES_NAME) or "").strip():
            os.environ[ALIASES_NAME] = ",".join(key.aliases)
    return key


def missing_key_hint() -> str:
    """Where a key can come from, for the error of a command that found none."""
    return ("Run `synth-ai setup --local` (it saves one to ./.env and the data dir's config.json), set "
            "ENVIRONMENT_API_KEY, or pass --env-file PATH with ENVIRONMENT_API_KEY=... .")
