"""Where `synth-ai setup` saves keys: a `.env` file (`./.env` unless `--env-file`) and `<data dir>/config.json`
(`~/.synth-ai/config.json` unless `SYNTH_AI_HOME` is set).

`config.json` is flat JSON with sorted keys and an indent of 2, as synth-ai 0.2.17 wrote it
(`{"ENVIRONMENT_API_KEY": "...", "SYNTH_API_KEY": "..."}`); other keys already in it are kept. Both files are
created 0600 and written atomically; a file whose content would not change is not rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from synth_ai.env.dotenv_files import ALIASES, read_env_file
from synth_ai.env.env_writer import (FileUpdate, KeyChange, chmod_file, file_mode, secure_mode, set_env_values,
                                     write_file)
from synth_ai.errors import InvalidInputError

CONFIG_FILE = "config.json"
KEY_NAMES = ("SYNTH_API_KEY", "ENVIRONMENT_API_KEY")


def default_env_file() -> Path:
    return Path.cwd() / ".env"


def config_path() -> Path:
    from synth_ai.env.paths import data_dir

    return data_dir() / CONFIG_FILE


def read_config(path: Path) -> dict[str, Any]:
    """The JSON object in `path` ({} when the file does not exist); a broken file is an error, never overwritten."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"Cannot read {path}: {exc}.", hint=f"Fix or delete {path}, then run setup again.") \
            from None
    if not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InvalidInputError(f"{path} is not valid JSON ({exc}); not overwriting it.",
                                hint=f"Fix or delete {path}, then run setup again.") from None
    if not isinstance(doc, dict):
        raise InvalidInputError(f"{path} must hold a JSON object; not overwriting it.",
                                hint=f"Fix or delete {path}, then run setup again.")
    return doc


def update_config(path: Path, values: Mapping[str, str]) -> FileUpdate:
    """Merge `values` into the config file; rewritten (0600) only when something changes."""
    mode_before = file_mode(path)
    doc = read_config(path)
    update = FileUpdate(path=path, created=mode_before is None, mode_before=mode_before)
    for key, value in values.items():
        old = doc.get(key)
        update.changes.append(KeyChange(key, old if isinstance(old, str) else None, value))
    merged = {**doc, **values}
    update.mode_after = secure_mode(mode_before, holds_secrets=True)
    if merged != doc or update.created:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the data folder: private from the start
        write_file(path, json.dumps(merged, indent=2, sort_keys=True) + "\n", mode=update.mode_after)
        update.written = True
    elif update.tightened:
        chmod_file(path, update.mode_after)
    return update


def existing_keys(env_file: Path, config_file: Path) -> dict[str, dict[str, str]]:
    """Keys already saved, by source: `{"env_file": {...}, "config": {...}}` (aliases resolved in the .env)."""
    from_env: dict[str, str] = {}
    if env_file.is_file():
        try:
            values = read_env_file(env_file)
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"Cannot read {env_file}: {exc}.",
                                    hint="Fix the file, or pass another one with --env-file.") from None
        for name in KEY_NAMES:
            for candidate in (name, *ALIASES.get(name, ())):
                if values.get(candidate, "").strip():
                    from_env[name] = values[candidate].strip()
                    break
    config = read_config(config_file)
    from_config = {n: config[n].strip() for n in KEY_NAMES if isinstance(config.get(n), str) and config[n].strip()}
    return {"env_file": from_env, "config": from_config}


def save_credentials(values: Mapping[str, str], *, env_file: Path, config_file: Path) -> list[FileUpdate]:
    """Write `values` to the `.env` file, then to the config file; returns what each write did.

    The config file is read first, so a broken one stops the command before either file changes."""
    read_config(config_file)
    return [set_env_values(env_file, values), update_config(config_file, values)]
