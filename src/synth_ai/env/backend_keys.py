"""API keys of the embedded backend, and the environment keys it knows for verifying task apps.

`<data dir>/backend_keys.json` (0600) holds the keys the backend accepts as `Authorization: Bearer <key>`:

    {"default": "sk_local_…", "keys": [{"key": "sk_local_…", "name": "default", "created_at": "…"}]}

The first start creates it with one key, the default; `create_key()` adds more (`synth-ai setup --local` calls it);
`default_key()` is what a client on this machine uses to talk to the embedded backend. The server re-reads the
file when it changes, so a key added while it runs is accepted at once.

`<data dir>/env_keys.json` (0600) lists ENVIRONMENT_API_KEY values registered with the backend: by
`synth-ai setup --local`, or uploaded sealed through `POST /api/v1/env-keys` (`serve`, `deploy`, `train`; see
`backend/store/sealed_keys.py`). `known_environment_keys()` / `environment_keys()` add the process environment's:
that is every key the backend knows, what `POST /api/rl/verify_task_app`, the create-time probe of
`POST /api/rl/jobs` and the RL worker try against a task app.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.fsutil import write_secret_file
from synth_ai.timestamps import utcnow

KEYS_FILE = "backend_keys.json"
ENV_KEYS_FILE = "env_keys.json"
KEY_PREFIX = "sk_local_"


def _data_dir(data_dir: Path | None) -> Path:
    if data_dir is not None:
        return Path(data_dir)
    from synth_ai.env.paths import data_dir as default_data_dir

    return default_data_dir()


def keys_path(data_dir: Path | None = None) -> Path:
    return _data_dir(data_dir) / KEYS_FILE


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        from synth_ai.errors import InvalidInputError

        raise InvalidInputError(f"{path}: cannot read the backend key file ({exc}).",
                                hint=f"Fix or delete {path}; the backend creates a new one on start.") from None
    return doc if isinstance(doc, dict) else {}


def _write(path: Path, doc: dict[str, Any]) -> None:
    write_secret_file(path, json.dumps(doc, indent=2) + "\n")


_file_lock = threading.Lock()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_hex(24)


def ensure_keys(data_dir: Path | None = None) -> str:
    """Create the key file with one default key if it has none; return the default key."""
    path = keys_path(data_dir)
    with _file_lock:
        doc = _read(path)
        keys = [k for k in doc.get("keys", []) if isinstance(k, dict) and k.get("key")]
        default = doc.get("default")
        if not keys:
            key = new_key()
            doc = {"default": key, "keys": [{"key": key, "name": "default", "created_at": utcnow()}]}
            _write(path, doc)
            return key
        if not default or default not in {k["key"] for k in keys}:
            doc["default"] = keys[0]["key"]
            _write(path, doc)
        return str(doc["default"])


def create_key(name: str = "key", *, key: str | None = None, make_default: bool = False,
               data_dir: Path | None = None) -> str:
    """Register a key the backend accepts (a new random one unless `key` is given); returns it."""
    path = keys_path(data_dir)
    value = key or new_key()
    with _file_lock:
        doc = _read(path)
        keys = [k for k in doc.get("keys", []) if isinstance(k, dict) and k.get("key")]
        if value not in {k["key"] for k in keys}:
            keys.append({"key": value, "name": name, "created_at": utcnow()})
        doc["keys"] = keys
        if make_default or not doc.get("default"):
            doc["default"] = value
        _write(path, doc)
    return value


def default_key(data_dir: Path | None = None) -> str | None:
    """The key a local client should send to the embedded backend, or None before its first start."""
    doc = _read(keys_path(data_dir))
    default = doc.get("default")
    return str(default) if default else None


def accepted_keys(data_dir: Path | None = None) -> list[str]:
    doc = _read(keys_path(data_dir))
    return [str(k["key"]) for k in doc.get("keys", []) if isinstance(k, dict) and k.get("key")]


# Environment keys (for verify_task_app, create-time probes and the RL worker) -----------------------------------
ENV_KEY_NAMES = ("ENVIRONMENT_API_KEY", "DEV_ENVIRONMENT_API_KEY", "dev_environment_api_key")
UPLOADED = "upload"  # `source` of a key that arrived sealed through POST /api/v1/env-keys
WITH_JOB = "job"  # `source` of a key sent inside an RL create body (kept out of the stored payload)
SETUP = "setup"  # `source` of a key `synth-ai setup --local` registered
MAX_UPLOADED = 8
_ORIGINS = {UPLOADED: "uploaded sealed (serve/deploy/train)", WITH_JOB: "sent with an RL job",
            SETUP: "registered by `synth-ai setup --local`"}


@dataclass(frozen=True)
class KnownKey:
    """An ENVIRONMENT_API_KEY the backend can present to task apps, and where it learned it (for messages that
    say which key was tried without showing it)."""

    value: str
    origin: str  # "env ENVIRONMENT_API_KEY", "uploaded (serve/deploy/train)", "registered (setup --local)", ...

    def describe(self) -> str:
        from synth_ai.env.secrets import mask_secret

        return f"{mask_secret(self.value)} ({self.origin})"


def env_keys_path(data_dir: Path | None = None) -> Path:
    return _data_dir(data_dir) / ENV_KEYS_FILE


def register_environment_key(key: str, *, name: str = "ENVIRONMENT_API_KEY", source: str = SETUP,
                             data_dir: Path | None = None) -> dict[str, Any]:
    """Remember an ENVIRONMENT_API_KEY so the backend can present it to task apps; returns the stored entry without
    its value. Uploads (and keys sent with jobs) go first, the newest is the likeliest to be right, and only the
    newest `MAX_UPLOADED` are kept: several task apps with different keys can be served at once, so an upload does
    not replace the others; keys registered by `setup --local` are all kept."""
    path = env_keys_path(data_dir)
    now = utcnow()
    with _file_lock:
        doc = _read(path)
        entries = [e for e in doc.get("keys", []) if isinstance(e, dict) and e.get("key")]
        existing = next((e for e in entries if e["key"] == key), None)
        if existing is None:
            existing = {"id": "envkey_" + secrets.token_hex(6), "key": key, "name": name, "source": source,
                        "created_at": now}
        else:
            entries.remove(existing)
        existing.setdefault("id", "envkey_" + secrets.token_hex(6))
        existing["updated_at"] = now
        if existing.get("source", SETUP) != SETUP:
            uploads = [e for e in entries if e.get("source", SETUP) != SETUP][:MAX_UPLOADED - 1]
            others = [e for e in entries if e.get("source", SETUP) == SETUP]
            entries = [existing, *uploads, *others]
        else:
            entries.append(existing)
        _write(path, {"keys": entries})
        return {k: v for k, v in existing.items() if k != "key"}


def stored_environment_keys(data_dir: Path | None = None) -> list[dict[str, Any]]:
    """Entries of env_keys.json (values included: callers must not show them)."""
    doc = _read(env_keys_path(data_dir))
    return [e for e in doc.get("keys", []) if isinstance(e, dict) and e.get("key")]


def known_environment_keys(data_dir: Path | None = None, environ: dict[str, str] | None = None) -> list[KnownKey]:
    """Every ENVIRONMENT_API_KEY the backend knows, in the order to try them: the backend process's environment
    (ENVIRONMENT_API_KEY, its fallbacks, ENVIRONMENT_API_KEY_ALIASES), then uploaded keys (newest first), then the
    ones `synth-ai setup --local` registered. Duplicates appear once."""
    env = os.environ if environ is None else environ
    found: list[KnownKey] = []
    for name in ENV_KEY_NAMES:
        value = env.get(name, "").strip()
        if value:
            found.append(KnownKey(value, f"backend env {name}"))
    for alias in env.get("ENVIRONMENT_API_KEY_ALIASES", "").split(","):
        if alias.strip():
            found.append(KnownKey(alias.strip(), "backend env ENVIRONMENT_API_KEY_ALIASES"))
    for entry in stored_environment_keys(data_dir):
        found.append(KnownKey(str(entry["key"]), _ORIGINS.get(str(entry.get("source", SETUP)), _ORIGINS[SETUP])))
    unique: list[KnownKey] = []
    for key in found:
        if key.value not in {k.value for k in unique}:
            unique.append(key)
    return unique


def environment_keys(data_dir: Path | None = None, environ: dict[str, str] | None = None) -> list[str]:
    """The values of `known_environment_keys`: every task-app key the backend knows, in the order to try them."""
    return [k.value for k in known_environment_keys(data_dir, environ)]
