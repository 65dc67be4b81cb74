"""What `verifiers:<target>` names: an installed environment package, or a local module defining a taskset.

A local target is a path (it contains a path separator, ends in `.py`, or exists): a `.py` file, or a package
directory (with `__init__.py`). Its parent directory joins `sys.path` and the module's name becomes the taskset
id, which is how verifiers itself imports tasksets (`import <id>`). Anything else is an installed id, in the Hub's
spelling or not (`owner/name@version` imports as `name`, dashes as underscores).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.errors import InvalidInputError, NotFoundError, UnavailableError
from synth_ai.verifiers_app import ENV_ARGS_VAR, PREFIX, install_hint


class VerifiersMissingError(UnavailableError):
    code = "verifiers_not_installed"


class EnvironmentNotFoundError(NotFoundError):
    code = "verifiers_environment_not_found"


@dataclass(frozen=True)
class Target:
    """A resolved target: the taskset id verifiers imports, and the local module behind it (None: installed)."""

    spec: str  # as the user wrote it, after the prefix
    taskset_id: str
    path: Path | None = None

    @property
    def app_id(self) -> str:
        return PREFIX + self.spec

    @property
    def module_name(self) -> str:
        return self.taskset_id.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()


def require_verifiers() -> Any:
    """`verifiers.v1`, or a clear error naming the extra to install."""
    try:
        import verifiers.v1 as vf
    except ImportError as exc:
        missing = getattr(exc, "name", None) or "verifiers"
        raise VerifiersMissingError(
            f"Serving a verifiers environment needs the verifiers package (import of {missing!r} failed).",
            hint=install_hint()) from None
    return vf


def spec_of(app_id: str) -> str:
    spec = app_id[len(PREFIX):] if app_id.startswith(PREFIX) else app_id
    if not spec.strip():
        raise InvalidInputError(f"'{app_id}' names no environment.",
                                hint="Write verifiers:<installed environment id> or verifiers:<path to a module>.")
    return spec.strip()


def looks_like_path(spec: str) -> bool:
    """A path: ends in `.py`, starts like one, or exists. `owner/name[@version]` (one slash) is a Hub id."""
    if spec.endswith(".py") or spec.startswith((".", "/", "~")) or Path(spec).expanduser().exists():
        return True
    return spec.count("/") > 1


def resolve_target(app_id: str, *, base_dir: Path | None = None) -> Target:
    """The target `app_id` (`verifiers:<spec>`) names; a local module's directory joins sys.path."""
    spec = spec_of(app_id)
    require_verifiers()  # first: nothing below means anything without it (and the look-ups below import it)
    if looks_like_path(spec):
        return _local_target(spec, base_dir)
    target = Target(spec=spec, taskset_id=spec)
    if importlib.util.find_spec(target.module_name) is None and not bundled(target.module_name):
        installed = installed_environments()
        listing = ", ".join(installed) if installed else "none found"
        raise EnvironmentNotFoundError(
            f"No verifiers environment '{spec}' is installed (no module named {target.module_name!r}). "
            f"Installed environments: {listing}.",
            hint="Install its package (pip install <package>), or pass a local module: "
                 "verifiers:./path/to/my_env.py.")
    return target


def _local_target(spec: str, base_dir: Path | None) -> Target:
    raw = Path(spec).expanduser()
    path = raw if raw.is_absolute() else (base_dir or Path.cwd()) / raw
    path = path.resolve()
    if path.is_file() and path.suffix == ".py":
        module_dir, name = path.parent, path.stem
    elif path.is_dir() and (path / "__init__.py").is_file():
        module_dir, name = path.parent, path.name
    else:
        what = "does not exist" if not path.exists() else "is neither a .py file nor a package directory"
        raise EnvironmentNotFoundError(
            f"The verifiers environment path {path} {what}.",
            hint="Point at a module that defines a vf.Taskset subclass (exported in __all__): "
                 "verifiers:./my_env.py or verifiers:./my_env/ (a directory with __init__.py).")
    add_import_path(module_dir)
    return Target(spec=spec, taskset_id=name, path=path)


def add_import_path(directory: Path) -> None:
    """`directory` importable here and in the processes verifiers starts (its tool servers run as
    `python -m <module>`)."""
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(directory) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(directory), *paths])


def bundled(module: str) -> bool:
    """A taskset shipped inside verifiers (`verifiers.v1.tasksets.<module>`): verifiers imports it before any
    top-level module of the same name (the `textarena` taskset before the textarena library)."""
    return importlib.util.find_spec("verifiers") is not None and \
        importlib.util.find_spec(f"verifiers.v1.tasksets.{module}") is not None


def installed_environments() -> list[str]:
    """Distributions that depend on verifiers (environment packages), plus the tasksets bundled with it."""
    found = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata.get("Name") or ""
        if name.lower() == "verifiers":
            continue
        # An environment needs verifiers outright; a package offering it as an extra (synth-ai itself) is none.
        if any(req.split(";")[0].strip().lower().startswith("verifiers") and "extra" not in req.partition(";")[2]
               for req in dist.requires or []):
            found.add(name)
    if importlib.util.find_spec("verifiers") is not None:
        import pkgutil

        spec = importlib.util.find_spec("verifiers.v1.tasksets")
        for module in pkgutil.iter_modules(spec.submodule_search_locations if spec else []):
            found.add(module.name)
    return sorted(found)


def env_args_from_environ(environ: Any = None) -> dict[str, Any]:
    """The taskset config fields from `SYNTH_VERIFIERS_ENV_ARGS` (what `--env-args` sets)."""
    raw = (environ if environ is not None else os.environ).get(ENV_ARGS_VAR, "")
    return parse_env_args(raw, source=ENV_ARGS_VAR) if raw.strip() else {}


def parse_env_args(raw: str, *, source: str = "--env-args") -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise InvalidInputError(f"{source} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).",
                                hint='Pass a JSON object of the taskset\'s config fields, e.g. \'{"num_tasks": 10}\'.'
                                ) from None
    if not isinstance(value, dict):
        raise InvalidInputError(f"{source} must be a JSON object, not {type(value).__name__}.",
                                hint='Pass a JSON object of the taskset\'s config fields, e.g. \'{"num_tasks": 10}\'.')
    return value
