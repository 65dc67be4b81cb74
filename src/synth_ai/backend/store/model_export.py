"""A model of this backend written out as a folder other tools load: Hugging Face transformers, peft, vLLM.

`build_export(store, model_id, merge=...)` prepares `<data_dir>/exports/<key>/` once (a temp folder renamed into
place, reused while the model's files are unchanged) holding `files/` and `manifest.json`:

- a base model or a full fine-tune: the whole model (`config.json`, safetensors, tokenizer, chat template,
  `generation_config.json`, and for Qwen3-VL `preprocessor_config.json`);
- a LoRA fine-tune: a PEFT adapter folder (`adapter_config.json`, `adapter_model.safetensors`, tokenizer, chat
  template). Its `base_model_name_or_path` is the hub id when the base is a real hub model; a base built on this
  machine (the tiny models) is exported too, under `base_model/`, and the manifest's `local_base` tells the
  client to point the adapter at that folder's final absolute path;
- `merge=True` on a LoRA fine-tune: the adapter merged into its base, a full model.

The manifest lists every file with its size and sha256, so a client can resume a download and check it.
torch/peft are imported only to merge.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

from synth_ai.backend.store.model_store import ModelStore, is_fine_tuned_id
from synth_ai.errors import NotFoundError
from synth_ai.fsutil import publish_folder

LOCAL_BASE = "base_model"  # where an adapter's locally built base goes inside the export
_SKIPPED = {"synth_model.json", "optimizer.pt", "scheduler.pt", "rng.pt", "state.json", "training_args.bin"}
LIST_HINT = "Run `synth-ai models list` to see the models of this backend."


def exports_root(store: ModelStore) -> Path:
    return store.data_dir / "exports"


def build_export(store: ModelStore, model_id: str, *, merge: bool = False) -> dict[str, Any]:
    """The manifest of `model_id`'s export (built now unless an up-to-date one exists); NotFoundError for an
    unknown model or weights that are gone."""
    source, card, entry = _source_of(store, model_id)
    adapter = (source / "adapter_config.json").exists()
    base_id = str(card.get("base_model") or model_id) if adapter or entry else model_id
    key = _export_key(model_id, merge and adapter, source)
    target = exports_root(store) / key
    manifest_path = target / "manifest.json"
    if manifest_path.exists():
        return json.loads(manifest_path.read_text())
    with publish_folder(target) as staging:
        files = staging / "files"
        files.mkdir()
        if adapter and merge:
            _write_merged(store, source, base_id, files)
        else:
            _copy_model_files(source, files)
        local_base = None
        hub_base = None
        if adapter and not merge:
            hub_base = _hub_id(base_id)
            if hub_base is None:
                local_base = LOCAL_BASE
                _copy_model_files(store.resolve(base_id), files / LOCAL_BASE)
                _ensure_generation_config(files / LOCAL_BASE)
            _point_adapter_at(files, hub_base or LOCAL_BASE)
        else:
            _ensure_generation_config(files)
        manifest = {
            "id": key, "model": model_id, "format": "peft_adapter" if adapter and not merge else "full",
            "merged": bool(adapter and merge), "base_model": base_id, "job_id": (entry or {}).get("job_id"),
            "base_model_name_or_path": hub_base, "local_base": local_base, "files": _file_list(files),
        }
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def export_file(store: ModelStore, key: str, relative: str) -> tuple[Path, dict[str, Any]]:
    """The path of one file of a prepared export, and its manifest entry; NotFoundError for anything not listed."""
    folder = exports_root(store) / key
    if not _EXPORT_KEY.fullmatch(key) or not (folder / "manifest.json").exists():
        raise NotFoundError(f"Export '{key}' does not exist on this backend.",
                            hint="Prepare it again with POST /api/exports (`synth-ai models export`).")
    manifest = json.loads((folder / "manifest.json").read_text())
    for item in manifest["files"]:
        if item["path"] == relative:
            return folder / "files" / relative, item
    raise NotFoundError(f"Export '{key}' has no file '{relative}'.", hint="The manifest lists its files.")


def _source_of(store: ModelStore, model_id: str) -> tuple[Path, dict[str, Any], dict[str, Any] | None]:
    """(folder, its model card, the fine-tuned index entry or None)."""
    from synth_ai.backend.ml.loading import read_model_card

    if is_fine_tuned_id(model_id):
        entry = store.fine_tuned_entry(model_id)
        if entry is None:
            raise NotFoundError(f"Model '{model_id}' is not a model of this backend.", hint=LIST_HINT)
        path = Path(entry["path"])
        if not path.is_dir() or not any(path.glob("*.safetensors")):
            job = entry.get("job_id") or "unknown"
            raise NotFoundError(
                f"The weights of '{model_id}' (job {job}) are missing from {path}: they were pruned or deleted.",
                hint=f"Re-run the training job {job} to train the model again.",
                details={"job_id": job, "path": str(path)})
        return path, read_model_card(path), entry
    known = {e["id"].lower(): e for e in store.list_models() if e.get("kind") == "base"}
    if model_id.strip().lower() not in known:
        from synth_ai.models.registry import find_model

        if find_model(model_id) is None:
            raise NotFoundError(f"Model '{model_id}' is not a model of this backend.", hint=LIST_HINT)
    path = store.resolve(model_id)
    return path, read_model_card(path), None


_EXPORT_KEY = re.compile(r"exp-[0-9a-f]{16}(-merged)?")  # what `_export_key` makes; anything else is not an export


def _export_key(model_id: str, merged: bool, source: Path) -> str:
    """Changes when the model's files change (a retrained id, a rebuilt tiny model)."""
    stamp = [(p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in sorted(source.iterdir()) if p.is_file()]
    digest = hashlib.sha256(json.dumps([model_id.lower(), merged, stamp]).encode()).hexdigest()[:16]
    return f"exp-{digest}{'-merged' if merged else ''}"


def _hub_id(base_id: str) -> str | None:
    """The hub id of a real hub model; None for a model built or kept only on this machine."""
    from synth_ai.models.registry import find_model

    info = find_model(base_id)
    return info.id if info is not None and not info.is_local else None


def _copy_model_files(source: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for item in sorted(Path(source).iterdir()):
        if item.is_file() and item.name not in _SKIPPED and not item.name.startswith("."):
            shutil.copy2(item, dest / item.name)


def _point_adapter_at(folder: Path, base: str) -> None:
    config_path = folder / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = base
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _ensure_generation_config(folder: Path) -> None:
    """A full model always carries `generation_config.json` (older folders may lack one): ids from config.json."""
    target = folder / "generation_config.json"
    if target.exists():
        return
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config") or config
    generation = {k: text[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if text.get(k) is not None}
    target.write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")


def _write_merged(store: ModelStore, adapter: Path, base_id: str, dest: Path) -> None:
    """The adapter merged into its base, saved whole in the base's dtype, with the adapter folder's tokenizer."""
    import warnings

    import torch
    from peft import PeftModel

    from synth_ai.backend.ml import loading

    base_path = store.resolve(base_id)
    config = loading.read_config(base_path)
    dtype = getattr(torch, str(config.get("dtype") or config.get("torch_dtype") or "float32"), torch.float32)
    base = loading.load_model(base_path, loading.Placement("cpu", dtype))
    with warnings.catch_warnings():  # a deprecation inside peft; nothing for a user to do
        warnings.filterwarnings("ignore", category=FutureWarning)
        merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    merged.save_pretrained(str(dest))
    for item in sorted(adapter.iterdir()):
        if item.is_file() and not item.name.startswith(("adapter_", ".")) and item.name not in _SKIPPED \
                and item.name != "README.md":
            shutil.copy2(item, dest / item.name)
    for extra in ("generation_config.json", "preprocessor_config.json", "chat_template.jinja"):
        if (base_path / extra).exists() and not (dest / extra).exists():
            shutil.copy2(base_path / extra, dest / extra)


def _file_list(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        out.append({"path": path.relative_to(folder).as_posix(), "size": path.stat().st_size,
                    "sha256": digest.hexdigest()})
    return out
