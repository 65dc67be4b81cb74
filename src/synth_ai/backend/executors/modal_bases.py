"""The model files a Modal job takes along: what the relay puts in the job's bundle besides its data, and what the
container registers from it before the job worker starts.

- a tiny model (the job's model, or the root base of its fine-tune) is copied: it is built here, never downloaded;
- a fine-tune of this backend used as the job's model (`[model].source = "ft:…"` / `"rl:…"`) is copied into
  `models/staged/<model's job id>/` with a manifest (`models/staged.json`): its folder lives only on this machine.
  The container registers it in its own model store under the same id, at the path the volume has there, so the
  trainer resolves it as it does here (the model index keeps absolute paths, which differ between the two);
- registry models are not copied: the container downloads them into the Hugging Face cache on the volume, and
  also the root base of a staged LoRA fine-tune (its adapter needs it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from synth_ai.errors import NotFoundError

STAGED_DIR = "models/staged"
MANIFEST = "models/staged.json"


def stage_models(data_dir: Path, model: str, bundle: Path) -> None:
    """Copy what `model` needs that only this machine has into `bundle` (a job's data dir to upload)."""
    from synth_ai.backend.store.model_store import ModelStore, is_fine_tuned_id

    root = model
    if is_fine_tuned_id(model):
        entry = ModelStore(data_dir).fine_tuned_entry(model)
        if entry is None or not Path(entry["path"]).is_dir():
            raise NotFoundError(f"The fine-tuned model '{model}' is not on this backend, so it cannot be uploaded "
                                "for the Modal job.", hint="List the models with GET /api/learning/models.")
        root = str(entry["base_model"])
        relative = f"{STAGED_DIR}/{_folder_name(entry, model)}"
        shutil.copytree(entry["path"], bundle / relative, dirs_exist_ok=True)  # symlinks followed: real files
        manifest = {model: {"base_model": root, "job_id": entry.get("job_id"), "path": relative,
                            "training": entry.get("training")}}
        (bundle / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    tiny = data_dir / "models" / "tiny"
    if root.startswith("synth-ai/tiny") and tiny.is_dir():
        shutil.copytree(tiny, bundle / "models" / "tiny", dirs_exist_ok=True)


def register_staged(data_dir: Path) -> list[str]:
    """In the container: register the staged fine-tunes in the job's model store; returns the root bases that must
    be fetched for them (those of LoRA fine-tunes)."""
    from synth_ai.backend.store.model_store import ModelStore

    try:
        manifest: dict[str, Any] = json.loads((data_dir / MANIFEST).read_text())
    except FileNotFoundError:
        return []
    store = ModelStore(data_dir)
    needed = []
    for model_id, entry in manifest.items():
        store.register_fine_tuned(model_id, entry["base_model"], str(entry.get("job_id") or ""),
                                  data_dir / entry["path"])
        if entry.get("training") == "lora":
            needed.append(entry["base_model"])
    return needed


def _folder_name(entry: dict[str, Any], model: str) -> str:
    name = str(entry.get("job_id") or "") or model
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
