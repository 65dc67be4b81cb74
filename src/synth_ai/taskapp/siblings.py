"""Importing a task app's helper files: a task app is often a folder of plain `.py` files, not a package, and is
loaded by path (discovery, `serve`, a Modal container), so `import crafter_env` next to it would not work."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_sibling(anchor: str | Path, name: str) -> ModuleType:
    """Import `<folder of anchor>/<name>.py` once per path, whichever way the anchor file itself was imported.

    Every file of the app that asks for the same sibling gets the same module object (it is cached in
    `sys.modules` under a name derived from its absolute path)."""
    path = Path(anchor).resolve().parent / f"{name}.py"
    module_name = f"_synth_taskapp_{name}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    return module
