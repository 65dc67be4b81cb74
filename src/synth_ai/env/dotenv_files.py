"""`.env` files: finding the nearest one, layering several, and reading values without surprises.

Values from files never override what the process environment already has (as in synth-ai 0.2.17). With several
`--env-file`s, earlier files win over later ones, so the first file is the "current" one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, MutableMapping
from pathlib import Path

from synth_ai.errors import InvalidInputError, NotFoundError

# Alternative names accepted for a variable, checked in order after the name itself.
ALIASES: dict[str, tuple[str, ...]] = {
    "ENVIRONMENT_API_KEY": ("dev_environment_api_key", "DEV_ENVIRONMENT_API_KEY"),
    "TASK_APP_URL": ("TASK_APP_BASE_URL",),
}


def find_nearest_env(start: Path | None = None) -> Path | None:
    """The nearest `.env` walking up from `start` (the working directory by default)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / ".env"
        if candidate.is_file():
            return candidate
    return None


def read_env_file(path: Path) -> dict[str, str]:
    """The values a `.env` file sets; a file that is not UTF-8 text or cannot be read is an input error."""
    from dotenv import dotenv_values

    try:
        values = dotenv_values(path, encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidInputError(f"{path} is not UTF-8 text; cannot read it as a .env file.",
                                hint="Fix the file's encoding, or pass another file with --env-file.") from None
    except OSError as exc:
        raise InvalidInputError(f"Cannot read {path}: {exc.strerror or exc}.",
                                hint="Check its permissions, or pass another file with --env-file.") from None
    return {k: v for k, v in values.items() if v is not None}


def load_env_files(paths: Iterable[str | Path], environ: MutableMapping[str, str] | None = None) -> list[Path]:
    """Load each file into `environ` without overriding existing values; every file must exist."""
    env = os.environ if environ is None else environ
    loaded: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.is_file():
            raise NotFoundError(f"Env file not found: {path.resolve()}",
                                hint="Check the --env-file path, or create it with `synth-ai setup`.")
        for key, value in read_env_file(path).items():
            if key not in env or not env[key]:
                env[key] = value
        loaded.append(path.resolve())
    return loaded


def load_command_env(env_files: Iterable[str | Path] | None = None) -> list[Path]:
    """What commands that talk to a backend or a task app load first (`train`, `eval`, `jobs`, `files`, `models`):
    every `--env-file` given, or else the nearest `.env` walking up from the working directory."""
    loaded = load_env_files(env_files or [])
    if not loaded:
        nearest = find_nearest_env()
        if nearest is not None:
            loaded = load_env_files([nearest])
    return loaded


def get_env(name: str, environ: MutableMapping[str, str] | None = None) -> str | None:
    """A variable's value, falling back to its aliases (`TASK_APP_BASE_URL` for `TASK_APP_URL`, ...) and then,
    for the process environment, to the keys `synth-ai setup` saved in `~/.synth-ai/config.json`."""
    env = os.environ if environ is None else environ
    for key in (name, *ALIASES.get(name, ())):
        value = env.get(key, "").strip()
        if value:
            return value
    if environ is None:
        saved = saved_credentials()
        for key in (name, *ALIASES.get(name, ())):
            if saved.get(key, "").strip():
                return saved[key].strip()
    return None


def saved_credentials() -> dict[str, str]:
    """The flat `config.json` written by `synth-ai setup` (unreadable or malformed: nothing; `setup` reports it)."""
    import json

    from synth_ai.env.paths import data_dir

    try:
        doc = json.loads((data_dir(create=False) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in doc.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(doc, dict) else {}
