"""Training checkpoints in a job's workdir: written whole or not at all, newest found by name.

Layout: `<workdir>/checkpoints/step-000040/` holding `weights.safetensors` (the trainable tensors: the whole model
for a full fine-tune, only the adapter and saved modules for LoRA), `optimizer.pt`, `scheduler.pt`, `rng.pt` and
`state.json` (step, loss history needed for the result, the settings fingerprint). A checkpoint is written into a
hidden temp folder, fsynced and renamed into place (`fsutil.publish_folder`); `state.json` is written last inside
it, and a folder without it is ignored. Only the newest `keep` checkpoints stay.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from synth_ai.fsutil import publish_folder

_NAME = re.compile(r"^step-(\d{6,})$")


def checkpoints_dir(workdir: Path) -> Path:
    return Path(workdir) / "checkpoints"


def latest(workdir: Path) -> Path | None:
    root = checkpoints_dir(workdir)
    if not root.is_dir():
        return None
    found = []
    for child in root.iterdir():
        match = _NAME.match(child.name)
        if match and (child / "state.json").exists():
            found.append((int(match.group(1)), child))
    return max(found)[1] if found else None


def save(workdir: Path, step: int, *, trainable: dict[str, Any], optimizer: Any, scheduler: Any,
         state: dict[str, Any], keep: int = 2, optimizer_state: dict[str, Any] | None = None) -> Path:
    """`trainable`: name -> tensor; `optimizer_state`: the optimizer's state dict when the caller gathered it
    already (a sharded model, `trainers.fsdp`), else `optimizer.state_dict()` is saved."""
    import torch
    from safetensors.torch import save_file

    root = checkpoints_dir(workdir)
    final = root / f"step-{step:06d}"
    with publish_folder(final, durable=True) as staging:
        save_file({k: v.detach().contiguous().cpu() for k, v in trainable.items()},
                  str(staging / "weights.safetensors"))
        torch.save(optimizer_state if optimizer_state is not None else optimizer.state_dict(),
                   staging / "optimizer.pt")
        torch.save(scheduler.state_dict(), staging / "scheduler.pt")
        rng = {"cpu": torch.random.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(rng, staging / "rng.pt")
        (staging / "state.json").write_text(json.dumps({**state, "step": step}, indent=2, sort_keys=True))
    _prune(root, keep)
    return final


def load(folder: Path) -> dict[str, Any]:
    """Everything in a checkpoint, as CPU tensors and plain data."""
    import torch
    from safetensors.torch import load_file

    return {
        "weights": load_file(str(folder / "weights.safetensors")),
        "optimizer": torch.load(folder / "optimizer.pt", map_location="cpu", weights_only=False),
        "scheduler": torch.load(folder / "scheduler.pt", map_location="cpu", weights_only=False),
        "rng": torch.load(folder / "rng.pt", map_location="cpu", weights_only=False),
        "state": json.loads((folder / "state.json").read_text()),
    }


def restore_rng(rng: dict[str, Any]) -> None:
    import torch

    torch.random.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


def _prune(root: Path, keep: int) -> None:
    steps = sorted((int(m.group(1)), c) for c in root.iterdir() if (m := _NAME.match(c.name)))
    for _, folder in steps[:-keep] if keep > 0 else []:
        shutil.rmtree(folder, ignore_errors=True)
    for leftover in root.glob(".step-*"):  # staging folders of a crashed save
        shutil.rmtree(leftover, ignore_errors=True)
