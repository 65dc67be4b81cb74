"""Importing task app files by path: the app file itself (`discovery.import_app_module`) and its helper files. A
task app is often a folder of plain `.py` files, not a package, loaded by path (discovery, `serve`, a Modal
container), so `import crafter_env` next to it is not something it can count on."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import ModuleType


def import_file(module_name: str, path: Path, *, guard: Callable[[], AbstractContextManager] = nullcontext,
                not_importable: Callable[[], Exception] | None = None) -> ModuleType:
    """Import `path` as `module_name`, once (cached in `sys.modules`); an import that fails leaves nothing cached,
    so the next call tries again. `guard` wraps running the file; `not_importable` makes the error for a path
    Python cannot import (default: ImportError)."""
    module = sys.modules.get(module_name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise not_importable() if not_importable is not None else ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with guard():
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def load_sibling(anchor: str | Path, name: str) -> ModuleType:
    """Import `<folder of anchor>/<name>.py` once per path, whichever way the anchor file itself was imported:
    every file of the app that asks for the same sibling gets the same module object."""
    path = Path(anchor).resolve().parent / f"{name}.py"
    return import_file(f"_synth_taskapp_{name}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}", path)
