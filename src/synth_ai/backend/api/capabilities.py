"""What this backend process can do, reported in its `/health` so that a client can refuse a job before it
uploads anything: training needs the `train` extra (torch, transformers, peft) in the backend's environment."""

from __future__ import annotations

import importlib.util
from typing import Any

TRAINING_MODULES = ("torch", "transformers", "peft")


def missing_modules(names: tuple[str, ...] = TRAINING_MODULES) -> list[str]:
    """Modules that cannot be found (looked up, not imported: the API process never loads torch)."""
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def training_capability() -> dict[str, Any]:
    """`{"available": bool, "missing": [...], "extra": "train"}` for the `training` field of `/health`."""
    missing = missing_modules()
    return {"available": not missing, "missing": missing, "extra": "train"}
