"""Models from elsewhere: a Hugging Face folder or a PEFT adapter made a model of this backend.

`import_model(store, folder, name=..., base=...)` copies the folder into `<data_dir>/models/imported/<name>/` (so
later changes to the original cannot change a registered model), writes our model card beside it and registers it
in the model index as `imported:<base>:<name>`. The id never poses as a hub model, and its middle part is the
registry base the model is built on, so jobs resolve its family and training modes like any fine-tune's:

- an adapter (`adapter_config.json`): its base comes from `base_model_name_or_path` when that is a registry id, or
  a folder holding the same weights as a base of this backend (an exported `base_model/`); `base` may name it, and
  must then agree with the adapter. Jobs continue training the adapter as LoRA. An adapter saved without
  its tokenizer gets its base's tokenizer files.
- a full model (`config.json` and safetensors): `base` names the registry model it is built like.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

from synth_ai.backend.store.model_import_checks import checked_adapter_config, check_full_model
from synth_ai.backend.store.model_store import ModelStore
from synth_ai.errors import InvalidInputError, NotFoundError
from synth_ai.fsutil import publish_folder

PREFIX = "imported"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_CARD = "synth_model.json"


def imported_id(base: str, name: str) -> str:
    return f"{PREFIX}:{base}:{name}"


def import_model(store: ModelStore, folder: Path, *, name: str | None = None, base: str | None = None
                 ) -> dict[str, Any]:
    """Register `folder`; the index entry of the new model. InvalidInputError says what is wrong and how to fix."""
    from synth_ai.models.registry import find_model

    source = Path(folder).expanduser()
    if not source.is_dir():
        raise NotFoundError(f"{source} is not a folder on the backend's machine.",
                            hint="Import a folder that the backend can read (an absolute path on its machine).")
    name = name or re.sub(r"[^A-Za-z0-9._-]+", "-", source.resolve().name).strip("-.") or "model"
    if not _NAME.match(name):
        raise InvalidInputError(f"--name {name!r} is not a valid model name.",
                                hint="Use letters, digits, '.', '_' and '-' (up to 64, starting alphanumeric).")
    adapter = (source / "adapter_config.json").exists()
    if not adapter and not ((source / "config.json").exists() and any(source.glob("*.safetensors"))):
        raise InvalidInputError(f"{source} is neither a PEFT adapter (adapter_config.json) nor a Hugging Face model "
                                "(config.json and .safetensors weights).",
                                hint="Point at the folder `save_pretrained` wrote.")
    if base is not None and find_model(base) is None:
        raise InvalidInputError(f"--base {base!r} is not a model of the registry.",
                                hint="Run `synth-ai models list` for the ids.")
    if adapter:  # parsed and checked now: a folder that would fail every job or chat is refused here
        base_id = _adapter_base(store, checked_adapter_config(source), base)
    else:
        check_full_model(source)
        base_id = _full_base(base)
    model_id = imported_id(base_id, name)
    if store.fine_tuned_entry(model_id) is not None:
        raise InvalidInputError(f"A model named {model_id!r} is imported already.",
                                hint="Pick another --name.")
    target = store.root / "imported" / name
    with publish_folder(target) as staging:
        for item in source.iterdir():
            if item.is_file() and not item.name.startswith(".") and item.name != _CARD:
                shutil.copy2(item, staging / item.name)
        if adapter and not (staging / "tokenizer_config.json").exists():
            _copy_base_tokenizer(Path(store.resolve(base_id)), staging)
        card = {"kind": "fine_tuned", "model_id": model_id, "base_model": base_id, "job_id": None,
                "training_kind": "lora" if adapter else "full", "imported_from": str(source.resolve())}
        (staging / _CARD).write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
    store.register_fine_tuned(model_id, base_id, None, target)
    return {**store.fine_tuned_entry(model_id), "kind": "imported"}


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "added_tokens.json",
                    "special_tokens_map.json", "chat_template.jinja")


def _copy_base_tokenizer(base: Path, staging: Path) -> None:
    """An adapter saved without its tokenizer takes its base's: jobs and inference read the model's folder."""
    for name in _TOKENIZER_FILES:
        if (base / name).exists():
            shutil.copy2(base / name, staging / name)


def _full_base(base: str | None) -> str:
    if base is None:
        raise InvalidInputError("A full model needs --base: the registry model it is built like (its family, "
                                "modalities and training modes come from there).",
                                hint="E.g. --base Qwen/Qwen3-0.6B; `synth-ai models list` shows the ids.")
    from synth_ai.models.registry import find_model

    return find_model(base).id  # checked by the caller


def _adapter_base(store: ModelStore, adapter_config: dict[str, Any], base: str | None) -> str:
    """The registry id of the adapter's base; an explicit `base` that disagrees with the adapter is refused."""
    from synth_ai.models.registry import find_model

    declared = str(adapter_config.get("base_model_name_or_path") or "")
    found = find_model(declared).id if declared and find_model(declared) else _local_base_id(store, declared)
    if base is not None:
        chosen = find_model(base).id
        if found is not None and found != chosen:
            raise InvalidInputError(
                f"The adapter was trained on {found} (its base_model_name_or_path is {declared!r}), not on {chosen}.",
                hint=f"Drop --base, or pass --base {found}.", details={"adapter_base": found, "base": chosen})
        return chosen
    if found is None:
        raise InvalidInputError(f"Cannot tell which base the adapter's base_model_name_or_path {declared!r} is.",
                                hint="Pass --base with the registry id of the model it was trained on.")
    return found


def _local_base_id(store: ModelStore, declared: str) -> str | None:
    """The id of the base of this backend whose weights a folder holds (an exported `base_model/`), or None."""
    folder = Path(declared) if declared else None
    if folder is None or not folder.is_absolute() or not (folder / "config.json").exists():
        return None
    size, wanted = _weights_size(folder), None
    for entry in store.list_models():
        candidate = Path(entry["path"])
        # sizes first: only a base whose weights weigh the same is read whole
        if entry.get("kind") != "base" or entry.get("status") != "ready" or _weights_size(candidate) != size:
            continue
        wanted = wanted or _weights_digest(folder)
        if _weights_digest(candidate) == wanted:
            return entry["id"]
    return None


def _weights_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def _weights_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.safetensors")):
        digest.update(path.name.encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def mismatched_import(store: ModelStore, model_id: str) -> tuple[str, str] | None:
    """For a job's `imported:<base>:<name>` naming a model imported on another base: (the job's base, the
    model's real base); None otherwise."""
    head, _, rest = model_id.strip().partition(":")
    if head.lower() != PREFIX or store.fine_tuned_entry(model_id) is not None:
        return None
    wanted_base, _, name = rest.rpartition(":")
    for entry in store.list_models():
        entry_head, _, entry_rest = str(entry["id"]).partition(":")
        if entry_head == PREFIX and entry_rest.rpartition(":")[2].lower() == name.lower():
            return wanted_base, str(entry["base_model"])
    return None
