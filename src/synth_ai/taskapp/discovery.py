"""Finding task apps by id or alias without importing every Python file.

Search roots, in order: the demo directory (`DEMO_DIR` in `<data dir>/demo.json`, when it exists), each entry of
`SYNTH_TASK_APP_SEARCH_PATH` (os.pathsep-separated), the working directory, `./examples`, `./synth_ai`, and the
bundled apps (`synth_ai/bundled_apps/`, inside the installed package; `SYNTH_BUNDLED_TASK_APPS_DIR` overrides it, an
empty value turns it off).

Each `*.py` file under a root that mentions `TaskAppConfig` or `TaskAppEntry` is parsed with `ast`: apps come from
`TaskAppEntry(app_id=…, aliases=…, description=…)` and `TaskAppConfig(app_id=…)` calls with literal arguments.
Modal scripts (`modal.App("name")`) are listed as kind `modal`. Unlike the reference, aliases match.

Below a root, the walk leaves out what holds no one's task app: hidden directories, caches and build output
(`IGNORED_DIRS`), virtual environments (any directory with a `pyvenv.cfg`), test and benchmark trees (`tests`,
`test`, `bench`, `benchmarks`) and test files (`test_*.py`, `*_test.py`, `conftest.py`), whose fixtures declare
apps that are not meant to be served. A root's own name never leaves it out, so an app kept in such a tree is found
by naming its folder in `SYNTH_TASK_APP_SEARCH_PATH`.

Only the chosen file is imported (`load_task_app`).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.bundled_apps import APPS_DIR
from synth_ai.taskapp.errors import TaskAppNotFoundError
from synth_ai.taskapp.siblings import import_file
from synth_ai.verifiers_app import is_verifiers_id

IGNORED_DIRS = frozenset({".git", "__pycache__", "node_modules", "venv", ".venv", "build", "dist", ".mypy_cache",
                          ".pytest_cache", "site-packages", ".tox", ".ruff_cache"})
# Test and benchmark trees: their fixtures declare apps (`toy-app`, `bench-prose`, ...) nobody means to serve.
NOT_APP_DIRS = frozenset({"tests", "test", "bench", "benchmarks"})
MAX_DEPTH = 8
MAX_FILE_BYTES = 2_000_000
_MARKERS = ("TaskAppConfig", "TaskAppEntry", "modal.App", "App(")


@dataclass
class AppChoice:
    app_id: str
    path: Path
    kind: str = "task_app"  # "task_app" or "modal" (a Modal script with no task-app entry)
    aliases: tuple[str, ...] = ()
    description: str = ""
    root: Path | None = None
    rank: tuple[Any, ...] = field(default_factory=tuple)

    def names(self) -> tuple[str, ...]:
        return (self.app_id, *self.aliases)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.app_id, "aliases": list(self.aliases), "description": self.description,
                "path": str(self.path), "kind": self.kind}


def bundled_apps_dir() -> Path | None:
    raw = os.environ.get("SYNTH_BUNDLED_TASK_APPS_DIR")
    if raw is not None:
        return Path(raw).expanduser().resolve() if raw.strip() else None
    return APPS_DIR if APPS_DIR.is_dir() else None


def _demo_dir() -> Path | None:
    from synth_ai.env.paths import data_dir

    try:
        doc = json.loads((data_dir(create=False) / "demo.json").read_text())
    except (OSError, ValueError):
        return None
    raw = doc.get("DEMO_DIR") if isinstance(doc, dict) else None
    return Path(raw).expanduser() if isinstance(raw, str) and raw else None


def search_roots(extra: Iterable[str | os.PathLike[str]] = ()) -> list[Path]:
    cwd = Path.cwd()
    candidates: list[Path | None] = [_demo_dir()]
    candidates += [Path(p) for p in extra]
    raw = os.environ.get("SYNTH_TASK_APP_SEARCH_PATH", "")
    candidates += [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]
    candidates += [cwd, cwd / "examples", cwd / "synth_ai", bundled_apps_dir()]
    roots: list[Path] = []
    for candidate in candidates:
        if candidate is None or not candidate.is_dir():
            continue
        resolved = candidate.resolve()
        if resolved not in roots:
            roots.append(resolved)
    return roots


def _walks_into(directory: Path, name: str) -> bool:
    if name in IGNORED_DIRS or name in NOT_APP_DIRS or name.startswith("."):
        return False
    return not (directory / name / "pyvenv.cfg").exists()


def _is_test_file(name: str) -> bool:
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def _python_files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    base_depth = len(root.parts)
    for directory, dirnames, filenames in os.walk(root):
        here = Path(directory)
        depth = len(here.parts) - base_depth
        dirnames[:] = sorted(d for d in dirnames if depth < MAX_DEPTH and _walks_into(here, d))
        for name in sorted(filenames):
            if name.endswith(".py") and not _is_test_file(name):
                yield here / name


def _literal(node: ast.AST | None, constants: dict[str, Any] | None = None) -> Any:
    """A literal value, resolving names bound to literals at module level (`APP_ID = "math"`)."""
    if node is None:
        return None
    if isinstance(node, ast.Name) and constants is not None:
        return constants.get(node.id)
    if isinstance(node, (ast.Tuple, ast.List)) and constants is not None:
        values = [_literal(elt, constants) for elt in node.elts]
        return None if any(v is None for v in values) else tuple(values)
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    constants: dict[str, Any] = {}
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else \
            [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else []
        for target in targets:
            if isinstance(target, ast.Name):
                value = _literal(stmt.value, constants)
                if value is not None:
                    constants[target.id] = value
    return constants


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        prefix = func.value.id + "." if isinstance(func.value, ast.Name) else ""
        return prefix + func.attr
    return ""


def scan_file(path: Path) -> list[AppChoice]:
    """The apps one file declares (no import)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return []
        source = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    if not any(marker in source for marker in _MARKERS):
        return []
    try:
        tree = ast.parse(source, filename=str(path))
    except (SyntaxError, ValueError, RecursionError):
        return []
    constants = _module_constants(tree)
    entries: dict[str, AppChoice] = {}
    configs: list[str] = []
    modal_apps: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        short = name.rsplit(".", 1)[-1]
        if short == "TaskAppEntry":
            app_id = _literal(keywords.get("app_id"), constants)
            if isinstance(app_id, str) and app_id:
                aliases = _literal(keywords.get("aliases"), constants) or ()
                description = _literal(keywords.get("description"), constants) or ""
                entries[app_id] = AppChoice(
                    app_id, path, aliases=tuple(a for a in aliases if isinstance(a, str)) if isinstance(
                        aliases, (list, tuple)) else (), description=description if isinstance(description, str)
                    else "")
        elif short == "TaskAppConfig":
            app_id = _literal(keywords.get("app_id"), constants)
            if isinstance(app_id, str) and app_id:
                configs.append(app_id)
        elif name in ("modal.App", "App"):
            app_name = _literal(node.args[0], constants) if node.args else _literal(keywords.get("name"), constants)
            if isinstance(app_name, str) and app_name:
                modal_apps.append(app_name)
    found = list(entries.values())
    found += [AppChoice(app_id, path) for app_id in configs if app_id not in entries]
    if not found:
        found = [AppChoice(name, path, kind="modal") for name in modal_apps]
    return found


def _rank(choice: AppChoice, order: int) -> tuple[Any, ...]:
    name = choice.path.name
    file_rank = 0 if name.endswith("task_app.py") else 1 if name.endswith("_app.py") else 2
    parent_rank = 0 if choice.path.parent.name in ("task_app", "task_apps") else 1
    return (order, 0 if choice.kind == "task_app" else 1, file_rank, parent_rank, choice.app_id, str(choice.path))


def discover_task_apps(*, roots: Iterable[Path] | None = None, include_modal: bool = False) -> list[AppChoice]:
    """Every app found under the search roots, best-ranked first; one choice per (id, file)."""
    seen: set[tuple[str, Path]] = set()
    seen_files: set[Path] = set()
    choices: list[AppChoice] = []
    for order, root in enumerate(search_roots() if roots is None else roots):
        for path in _python_files(Path(root)):
            resolved = path.resolve()
            if resolved in seen_files:
                continue
            seen_files.add(resolved)
            for choice in scan_file(resolved):
                if choice.kind == "modal" and not include_modal:
                    continue
                key = (choice.app_id, resolved)
                if key in seen:
                    continue
                seen.add(key)
                choice.root = Path(root)
                choice.rank = _rank(choice, order)
                choices.append(choice)
    choices.sort(key=lambda c: c.rank)
    return choices


def verifiers_choice(app_id: str) -> AppChoice:
    """`verifiers:<target>`: an environment served by `synth_ai.verifiers_app`, not a file found on disk; its path
    is the module that defines it (what a Modal image copies)."""
    from synth_ai.verifiers_app.app import module_file, resolve

    target = resolve(app_id)
    path = module_file(target)
    return AppChoice(app_id, path if path is not None else Path(target.module_name), kind="verifiers",
                     description=f"verifiers environment {target.spec}")


def available_ids(choices: Iterable[AppChoice]) -> list[str]:
    return sorted({c.app_id for c in choices})


def find_task_app(app_id: str | None, *, roots: Iterable[Path] | None = None, include_modal: bool = False,
                  choices: list[AppChoice] | None = None) -> AppChoice:
    """The app named `app_id` (an id or an alias; the best-ranked one when several files declare it). With no id,
    the only discovered app; several → an error listing them."""
    if choices is None and is_verifiers_id(app_id):
        return verifiers_choice(app_id)
    found = choices if choices is not None else discover_task_apps(roots=roots, include_modal=include_modal)
    hint = "Run `synth-ai task-app list` to see every app, or add a directory with SYNTH_TASK_APP_SEARCH_PATH."
    if not found:
        raise TaskAppNotFoundError("No task apps discovered for this command.", hint=hint)
    if app_id is None:
        ids = available_ids(found)
        if len(ids) == 1:
            return found[0]
        raise TaskAppNotFoundError(
            f"Several task apps were found; name one: {', '.join(ids)}.", hint="Pass the APP_ID argument.")
    for choice in found:
        if choice.app_id == app_id:
            return choice
    for choice in found:
        if app_id in choice.aliases:
            return choice
    raise TaskAppNotFoundError(f"Task app '{app_id}' not found. Available: {', '.join(available_ids(found))}",
                               hint=hint)


@contextmanager
def _import_guard() -> Iterator[None]:
    """While an app module is imported, `uvicorn.run` does nothing (scripts that serve at import time)."""
    try:
        import uvicorn
    except ImportError:  # pragma: no cover - uvicorn is a dependency
        yield
        return
    original = uvicorn.run
    uvicorn.run = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        uvicorn.run = original  # type: ignore[assignment]


def import_app_module(path: Path) -> Any:
    """Import a file as a module (once per path and modification time); its directory joins sys.path so the
    app's sibling modules import."""
    path = path.resolve()
    digest = hashlib.sha1(f"{path}:{path.stat().st_mtime_ns}".encode()).hexdigest()[:12]
    module_name = f"synth_ai_task_app_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    directory = str(path.parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return import_file(module_name, path, guard=_import_guard,
                       not_importable=lambda: TaskAppNotFoundError(f"Cannot import task app file {path}"))


def _identity(value: Any) -> Any:
    return value


def load_task_app(choice: AppChoice | str) -> Any:
    """Import the chosen app's file and return its `TaskAppEntry` (registered, or built from a module-level
    `TaskAppConfig` / zero-argument factory, with module-level `ENV_FILES` and `ModalDeploymentConfig`)."""
    from synth_ai.taskapp.config import ModalDeploymentConfig, TaskAppConfig, TaskAppEntry, get_registered

    if isinstance(choice, str):
        choice = find_task_app(choice)
    if is_verifiers_id(choice.app_id):
        from synth_ai.verifiers_app.app import task_app_entry

        return task_app_entry(choice.app_id, choice.path)
    module = import_app_module(choice.path)
    entry = get_registered(choice.app_id)
    if entry is None:
        factory = None
        for value in vars(module).values():
            if isinstance(value, TaskAppConfig) and value.app_id == choice.app_id:
                factory = functools.partial(_identity, value)
                break
        if factory is None:
            for name, value in vars(module).items():
                if callable(value) and not isinstance(value, type) and name.startswith(("build", "create", "make")):
                    try:
                        built = value()
                    except TypeError:
                        continue
                    if isinstance(built, TaskAppConfig) and built.app_id == choice.app_id:
                        factory = value
                        break
        if factory is None:
            raise TaskAppNotFoundError(
                f"{choice.path} mentions task app '{choice.app_id}' but defines no registered entry, "
                "module-level TaskAppConfig or factory for it.",
                hint="Register it with register_task_app(entry=TaskAppEntry(app_id=..., config_factory=...)).",
            )
        modal = next((v for v in vars(module).values() if isinstance(v, ModalDeploymentConfig)), None)
        env_files = getattr(module, "ENV_FILES", ()) or ()
        entry = TaskAppEntry(app_id=choice.app_id, description=choice.description, config_factory=factory,
                             env_files=tuple(env_files), modal=modal)
    if entry.source_path is None:
        entry.source_path = str(choice.path)
    return entry
