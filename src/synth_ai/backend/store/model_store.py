"""Where the embedded backend finds model weights: tiny local models, real Qwen checkpoints, fine-tuned results.

`ModelStore(data_dir)` maps a model id to a local Hugging Face-format folder:

- `synth-ai/tiny-qwen3`, `synth-ai/tiny-qwen3-vl`, `synth-ai/tiny-qwen3-hd64`: built deterministically on first
  use (`ml/tiny.py`) into `<data_dir>/models/tiny/<name>-r<recipe>/`; `synth-ai/random-qwen3-34m` (random weights,
  for benches: `ml/mid.py`) likewise into `<data_dir>/models/built/<name>-r<recipe>/`. A build runs under a file
  lock in a temp folder that is renamed into place, so two processes asking at once build once and nobody sees half
  a model.
- real ids (`Qwen/Qwen3-0.6B`, `Qwen/Qwen3-VL-2B-Instruct`, ...): a folder under
  `<data_dir>/models/local/<org>/<name>/`, or the Hugging Face cache (offline only: `HF_HUB_OFFLINE=1`, `local_files_only=True`); an absolute path to an
  HF-format folder also works. Missing weights raise `NotFoundError` that says how to make them available.
- fine-tuned ids (`ft:<base>:<job>`): registered by the trainer in `<data_dir>/models/index.json` (atomic writes
  under a lock), pointing at the job's final checkpoint folder; imported ones (`imported:<base>:<name>`,
  `model_import.py`) likewise, pointing at their copy under `<data_dir>/models/imported/`.

No torch import here; `huggingface_hub` is imported only to locate the cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from synth_ai.errors import InvalidInputError, NotFoundError
from synth_ai.fsutil import atomic_write_text, publish_folder
from synth_ai.models.registry import FINE_TUNED_PREFIXES as REGISTRY_PREFIXES

# imported: too (`model_import.py`); tinker://: a Tinker training client's checkpoints (`trainers/tinker/serve.py`)
FINE_TUNED_PREFIXES = (*(f"{prefix}:" for prefix in REGISTRY_PREFIXES), "tinker://")
_INDEX = "index.json"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def is_fine_tuned_id(model_id: str) -> bool:
    return model_id.strip().lower().startswith(FINE_TUNED_PREFIXES)


class ModelStore:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.root = self.data_dir / "models"
        self.tiny_root = self.root / "tiny"
        self.local_root = self.root / "local"
        self.index_path = self.root / _INDEX

    # Listing ----------------------------------------------------------------------------------------------------
    def list_models(self) -> list[dict[str, Any]]:
        """Base models usable here (tiny ones, local folders, the HF cache) and every registered fine-tuned model."""
        from synth_ai.backend.ml.mid import MID_IDS
        from synth_ai.backend.ml.tiny import TINY_IDS

        out: list[dict[str, Any]] = []
        for model_id in TINY_IDS + MID_IDS:
            path = self._built_path(model_id)
            built = (path / "config.json").exists()
            out.append(self._base_entry(model_id, path, created=_mtime(path) if built else None,
                                        status="ready" if built else "builds_on_first_use",
                                        source="tiny" if model_id in TINY_IDS else "built"))
        seen = set(TINY_IDS + MID_IDS)
        for model_id, path, source in self._real_models():
            if model_id.lower() in {s.lower() for s in seen}:
                continue
            seen.add(model_id)
            out.append(self._base_entry(model_id, path, created=_mtime(path), status="ready", source=source))
        for entry in self._read_index().values():
            status = "ready" if Path(entry["path"]).exists() else "missing"
            out.append({**entry, "kind": "imported" if entry.get("imported_from") else "fine_tuned", "status": status})
        return out

    def get_model(self, model_id: str) -> dict[str, Any]:
        """One entry of `list_models()` by id (case-insensitive); NotFoundError when unknown."""
        wanted = model_id.strip().lower()
        for entry in self.list_models():
            if entry["id"].lower() == wanted:
                return entry
        raise NotFoundError(f"Model '{model_id}' is not available on this backend.",
                            hint="List the models with GET /api/learning/models.")

    @staticmethod
    def _base_entry(model_id: str, path: Path, *, created: str | None, status: str, source: str) -> dict[str, Any]:
        return {"id": model_id, "base_model": model_id, "kind": "base", "created_at": created, "job_id": None,
                "path": str(path), "status": status, "source": source}

    # Resolving --------------------------------------------------------------------------------------------------
    def resolve(self, model_id: str) -> Path:
        """The local HF-format folder for `model_id` (building a tiny model on first use)."""
        raw = (model_id or "").strip()
        if not raw:
            raise InvalidInputError("Model identifier is empty.", hint="Pass a model id such as 'synth-ai/tiny-qwen3'.")
        if is_fine_tuned_id(raw):
            return self._resolve_fine_tuned(raw)
        from synth_ai.backend.ml.mid import MID_IDS
        from synth_ai.backend.ml.tiny import TINY_IDS

        for tiny_id in TINY_IDS:
            if raw.lower() == tiny_id.lower():
                return self.ensure_tiny(tiny_id)
        for mid_id in MID_IDS:
            if raw.lower() == mid_id.lower():
                return self.ensure_mid(mid_id)
        try:
            as_path = Path(raw).expanduser()
            if as_path.is_absolute():
                if (as_path / "config.json").exists():
                    return as_path
                raise NotFoundError(f"Model folder '{raw}' has no config.json.",
                                    hint="Point at a Hugging Face-format folder (config.json, weights, tokenizer).")
            return self._resolve_real(raw)
        except OSError as exc:  # e.g. a name too long for the file system: no such model here
            raise NotFoundError(f"Model '{raw[:200]}' cannot be looked up on this machine ({exc.strerror}).",
                                hint="Use a model id from GET /api/inference/v1/models.") from None

    def _resolve_fine_tuned(self, model_id: str) -> Path:
        entry = self._find_fine_tuned(model_id)
        if entry is None:
            raise NotFoundError(f"Fine-tuned model '{model_id}' is not registered on this backend.",
                                hint="Fine-tuned ids come from a succeeded job's `fine_tuned_model`; list them with "
                                "GET /api/learning/models.")
        path = Path(entry["path"])
        if not path.exists():
            raise NotFoundError(f"The checkpoint of '{model_id}' is missing from {path}.",
                                hint="It was deleted from the data dir; re-run the training job.")
        return path

    def fine_tuned_entry(self, model_id: str) -> dict[str, Any] | None:
        return self._find_fine_tuned(model_id)

    def _find_fine_tuned(self, model_id: str) -> dict[str, Any] | None:
        index = self._read_index()
        if model_id in index:
            return index[model_id]
        wanted = model_id.lower()
        for key, entry in index.items():
            if key.lower() == wanted:
                return entry
        return None

    def _resolve_real(self, model_id: str) -> Path:
        local = self.local_root / model_id
        if (local / "config.json").exists():
            return local
        snapshot = _hf_cache_snapshot(model_id)
        if snapshot is not None:
            return snapshot
        cache = _hf_cache_dir()
        raise NotFoundError(
            f"Model '{model_id}' is not available offline: it is neither in the Hugging Face cache ({cache}) nor "
            f"in {local}.",
            hint=f"Download it on a machine with network access (`huggingface-cli download {model_id}`) and copy the "
            f"cache, or place a Hugging Face-format folder at {local}; or use the built-in 'synth-ai/tiny-qwen3' / "
            "'synth-ai/tiny-qwen3-vl'.",
        )

    def _real_models(self) -> Iterator[tuple[str, Path, str]]:
        if self.local_root.is_dir():
            for config in sorted(self.local_root.glob("*/*/config.json")):
                folder = config.parent
                yield f"{folder.parent.name}/{folder.name}", folder, "local"
        from synth_ai.models.registry import all_models

        for info in all_models():
            if info.is_local:
                continue
            snapshot = _hf_cache_snapshot(info.id)
            if snapshot is not None:
                yield info.id, snapshot, "hf_cache"

    # Models built here: tiny and mid-size ------------------------------------------------------------------------
    def _built_path(self, model_id: str) -> Path:
        from synth_ai.backend.ml.mid import MID_IDS, mid_cache_folder_name
        from synth_ai.backend.ml.tiny import cache_folder_name

        if model_id in MID_IDS:
            return self.root / "built" / mid_cache_folder_name(model_id)
        return self.tiny_root / cache_folder_name(model_id)

    def ensure_tiny(self, model_id: str, recipe: Any = None) -> Path:
        """Build the tiny model once (under a lock, in a temp folder renamed into place) and return its folder."""
        from synth_ai.backend.ml import tiny

        target = self._built_path(model_id)
        if recipe is not None:  # a custom recipe (tests) gets its own folder
            target = target.with_name(f"{target.name}-{_recipe_digest(recipe)}")
        if (target / "config.json").exists():
            return target
        kwargs = {} if recipe is None else {"recipe": recipe}
        if model_id == tiny.TINY_VL_ID:
            text_dir = self.ensure_tiny(tiny.TINY_TEXT_ID, recipe)
            return self._build_once(target, lambda staging: tiny.build_vl(staging, text_dir, **kwargs))
        return self._build_once(target, lambda staging: tiny.build_text(staging, model_id=model_id, **kwargs))

    def ensure_mid(self, model_id: str, recipe: Any = None) -> Path:
        """Build the mid-size bench model once, the way `ensure_tiny` builds a tiny one."""
        from synth_ai.backend.ml import mid

        target = self._built_path(model_id)
        if recipe is not None:
            target = target.with_name(f"{target.name}-{_recipe_digest(recipe)}")
        kwargs = {} if recipe is None else {"recipe": recipe}
        return self._build_once(target, lambda staging: mid.build_mid_text(staging, **kwargs))

    def _build_once(self, target: Path, build: Any) -> Path:
        """`build(staging)` under a lock into a temp folder renamed to `target`, unless `target` is there."""
        if (target / "config.json").exists():
            return target
        with self._lock(f"build-{target.name}"):
            if (target / "config.json").exists():
                return target
            with publish_folder(target) as staging:
                build(staging)
        return target

    # Fine-tuned models ------------------------------------------------------------------------------------------
    def register_fine_tuned(self, model_id: str, base_model: str, job_id: str | None, path: Path) -> None:
        if not is_fine_tuned_id(model_id):
            raise InvalidInputError(f"Fine-tuned model ids start with {', '.join(FINE_TUNED_PREFIXES)} "
                                    f"(got '{model_id}').")
        card: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            card = json.loads((Path(path) / "synth_model.json").read_text())
        entry = {"id": model_id, "base_model": base_model, "job_id": job_id, "path": str(Path(path).resolve()),
                 "created_at": _now(), "training": card.get("training_kind")}
        if card.get("imported_from"):
            entry["imported_from"] = card["imported_from"]
        with self._lock("index"):
            index = self._read_index()
            index[model_id] = entry
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.index_path, json.dumps(index, indent=2, sort_keys=True) + "\n")

    def unregister(self, model_id: str) -> bool:
        """Forget a registered model (its files are the caller's); False when it was not registered."""
        with self._lock("index"):
            index = self._read_index()
            if index.pop(model_id, None) is None:
                return False
            atomic_write_text(self.index_path, json.dumps(index, indent=2, sort_keys=True) + "\n")
        return True

    def _read_index(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.index_path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise InvalidInputError(f"The model index {self.index_path} is not valid JSON ({exc}).",
                                    hint="Restore it from a backup or delete it to forget fine-tuned models.") from exc
        return data if isinstance(data, dict) else {}

    # Locking ----------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[None]:
        locks = self.root / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        # flock belongs to the open file description, so it also excludes other threads of this process
        with open(locks / f"{name}.lock", "a+") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _recipe_digest(recipe: Any) -> str:
    import dataclasses
    import hashlib

    blob = json.dumps(dataclasses.asdict(recipe), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def _mtime(path: Path) -> str | None:
    try:
        stamp = path.stat().st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _hf_cache_dir() -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from huggingface_hub import constants

        return Path(constants.HF_HUB_CACHE)
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        root = os.environ.get("HF_HOME", str(Path.home() / ".cache" / "huggingface"))
        return Path(os.environ.get("HF_HUB_CACHE", str(Path(root) / "hub")))


def _hf_cache_snapshot(model_id: str) -> Path | None:
    """The newest cached snapshot of `model_id` that has a config.json, without touching the network."""
    if model_id.count("/") != 1:
        return None
    repo = _hf_cache_dir() / ("models--" + model_id.replace("/", "--"))
    if not repo.is_dir():
        # the cache folder name keeps the repo's case; look for a case-insensitive match
        parent = repo.parent
        if not parent.is_dir():
            return None
        wanted = repo.name.lower()
        matches = [p for p in parent.iterdir() if p.name.lower() == wanted]
        if not matches:
            return None
        repo = matches[0]
    ref = repo / "refs" / "main"
    if ref.exists():
        snapshot = repo / "snapshots" / ref.read_text().strip()
        if (snapshot / "config.json").exists():
            return snapshot
    candidates = sorted((p for p in (repo / "snapshots").glob("*") if (p / "config.json").exists()),
                        key=lambda p: p.stat().st_mtime, reverse=True)
    return candidates[0] if candidates else None
