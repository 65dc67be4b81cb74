"""The checkpoints a Tinker training client saved, on disk, as the API lists, finds and deletes them.

A client's `tinker` job writes them in its work folder (`trainers/tinker/serve.py`):
`<job dir>/work/tinker/weights/<name>/` (`save_state`: the adapter and the Adam state) and
`<job dir>/work/tinker/sampler_weights/<name>/` (`save_weights_for_sampler`: a PEFT adapter folder). The worker
writes a checkpoint in a hidden folder beside it and renames it into place whole (`write`); hidden folders are
not checkpoints, and a checkpoint counts only once every file its loader reads is there.
Samplers kept in the worker's memory (`save_weights_and_get_sampling_client()` without a name) have no folder and
are not checkpoints. Nothing here imports torch: the API process reads these folders.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from synth_ai.backend.server_settings import BackendSettings
from synth_ai.errors import InvalidInputError
from synth_ai.fsutil import publish_folder
from synth_ai.timestamps import file_time

TRAINABLE_FILE = "trainable.pt"  # the adapter's tensors (trainers/tinker/client_model.py writes and reads them)
OPTIMIZER_FILE = "optimizer.pt"  # the Adam state and step count
# kind -> the files its loader reads
_FILES: dict[str, tuple[str, ...]] = {"weights": (TRAINABLE_FILE, OPTIMIZER_FILE),
                                      "sampler_weights": (TRAINABLE_FILE,)}
# kind (the tinker:// path's segment) -> the SDK's checkpoint_type
CHECKPOINT_TYPES = {"weights": "training", "sampler_weights": "sampler"}


@dataclass(frozen=True)
class SavedCheckpoint:
    kind: str           # weights | sampler_weights
    name: str
    folder: Path
    time: str           # when its last file was written (ISO, UTC)
    size_bytes: int

    @property
    def checkpoint_id(self) -> str:
        return f"{self.kind}/{self.name}"


def checkpoints_root(settings: BackendSettings, job_id: str) -> Path:
    """The folder holding a training client's checkpoints (its job's work folder, `tinker/`)."""
    return settings.job_dir(job_id) / "work" / "tinker"


def check_name(name: object) -> str:
    """A checkpoint name is one folder name: the `<name>` of `tinker://<model id>/<kind>/<name>`."""
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise InvalidInputError(f"A checkpoint name must be a non-empty name without '/' that does not start with "
                                f"'.' (found {name!r}).",
                                hint="Name it like save_state('step-10') does.")
    return name


def find(root: Path, kind: str, name: str) -> SavedCheckpoint | None:
    """The checkpoint `<kind>/<name>` under `root` once its files are all written; None when there is none."""
    if kind not in _FILES:
        raise InvalidInputError(f"'{kind}' is not a kind of checkpoint of this backend.",
                                hint="Checkpoint ids look like weights/<name> or sampler_weights/<name>.")
    folder = root / kind / check_name(name)
    try:
        written = max((folder / file).stat().st_mtime for file in _FILES[kind])
    except FileNotFoundError:
        return None
    size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
    return SavedCheckpoint(kind, name, folder, file_time(written), size)


def saved(root: Path) -> list[SavedCheckpoint]:
    """Every checkpoint under `root`, newest first."""
    found = []
    for kind in _FILES:
        folders = (root / kind).iterdir() if (root / kind).is_dir() else ()
        found.extend(c for f in folders if f.is_dir() and not f.name.startswith(".")  # hidden: being written
                     and (c := find(root, kind, f.name)) is not None)
    return sorted(found, key=lambda c: (c.time, c.checkpoint_id), reverse=True)


def write(root: Path, kind: str, name: str, fill: Callable[[Path], None]) -> Path:
    """Write checkpoint `<kind>/<name>` under `root` whole: `fill(folder)` writes its files in a hidden folder
    beside it, which then takes the place of any earlier checkpoint of that name (`fsutil.publish_folder`)."""
    final = root / kind / check_name(name)
    with publish_folder(final) as staging:
        fill(staging)
    return final


def delete(checkpoint: SavedCheckpoint) -> None:
    shutil.rmtree(checkpoint.folder)
