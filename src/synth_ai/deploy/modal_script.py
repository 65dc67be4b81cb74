"""The Modal app for a task app: a plan (what goes into the image, which secrets, volumes and limits) and the
Python source that `modal deploy` / `modal serve` runs.

The generated source uses only the Modal SDK and literal values, so any `modal` CLI can run it, whatever
interpreter it lives in; `synth_ai` itself is imported only inside the container (and by `.local()`). Secret
values never appear in it: env files are attached with `Secret.from_dotenv(path)` and keys that live only in the
process environment with `Secret.from_local_environ([names])`, both read by Modal at deploy time. The entry's
`environment` pairs (e.g. a verifiers environment's `SYNTH_VERIFIERS_ENV_ARGS`) are not secrets: they are written
into the source as literals and set by the web function before the task app loads.

Layout in the container:

    /opt/synth_ai/synth_ai/            this package (a local directory, not an install from the package index)
    /opt/synth_ai/task_app/<dir>/      the directory of the module that registers the task app; for a package
                                       (`<pkg>/__init__.py`) that is the package itself, so it imports by its name;
                                       for a module installed in site-packages, only that file
    <extra_local_dirs>                 as the entry's ModalDeploymentConfig says

An entry with no module of its own (a taskset bundled with verifiers) copies nothing: the image installs it.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

REMOTE_ROOT = "/opt/synth_ai"
FUNCTION_NAME = "fastapi_app"
DEFAULT_CONCURRENCY = 32

# Never copied into the image: caches, VCS data, local databases, and env files (secrets go through Modal
# Secrets, never through the image).
MOUNT_IGNORE: tuple[str, ...] = (
    "**/__pycache__", "**/*.pyc", "**/.git", "**/.cache", "**/.venv", "**/node_modules",
    "**/*.db", "**/*.db-journal", "**/*-wal", "**/*-shm", "**/.env", "**/*.env", "**/.env.*",
)

# The runtime dependencies of synth_ai when its metadata is unavailable (running from a source tree).
_FALLBACK_RUNTIME_DEPS: tuple[str, ...] = (
    "typer>=0.12", "httpx>=0.27", "pydantic>=2.6,<3", "python-dotenv>=1.0", "rich>=13", "fastapi>=0.110",
    "uvicorn>=0.29", "python-multipart>=0.0.9",
)

_APP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Directories that hold installed distributions: a module found there is copied alone, never its directory.
_INSTALL_DIR_NAMES = frozenset({"site-packages", "dist-packages"})


def runtime_requirements() -> list[str]:
    """synth_ai's own install requirements (no extras): what the container needs to import the SDK."""
    try:
        requires = importlib.metadata.requires("synth-ai") or []
    except importlib.metadata.PackageNotFoundError:
        return list(_FALLBACK_RUNTIME_DEPS)
    return [req for req in requires if "extra" not in req.partition(";")[2]] or list(_FALLBACK_RUNTIME_DEPS)


def package_dir() -> Path:
    import synth_ai

    return Path(synth_ai.__file__).resolve().parent


@dataclass(frozen=True)
class ModalPlan:
    """Everything the generated Modal app contains. Built from a `TaskAppEntry` by `plan_for_entry`."""

    app_id: str
    app_name: str
    module_path: Path | None  # the file that registers the task app (None: nothing of its own to copy)
    python_version: str = "3.11"
    apt_packages: tuple[str, ...] = ()
    pip_packages: tuple[str, ...] = ()
    local_dirs: tuple[tuple[str, str], ...] = ()  # (local, remote): this package, the app dir, extra dirs
    local_files: tuple[tuple[str, str], ...] = ()  # (local, remote): a module installed in site-packages
    environment: tuple[tuple[str, str], ...] = ()  # (name, value) set in the container; not secrets
    secret_names: tuple[str, ...] = ()
    dotenv_files: tuple[Path, ...] = ()
    environ_secret_names: tuple[str, ...] = ()  # taken from the deploying process's environment
    volumes: tuple[tuple[str, str], ...] = ()  # (volume name, mount path)
    timeout: int = 600
    memory: int = 4096
    cpu: float = 2.0
    min_containers: int = 1
    max_containers: int = 4
    concurrency: int = DEFAULT_CONCURRENCY
    function_name: str = FUNCTION_NAME
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def remote_module_path(self) -> str | None:
        if self.module_path is None:
            return None
        return str(PurePosixPath(REMOTE_ROOT, "task_app", self.module_path.parent.name, self.module_path.name))


def plan_for_entry(
    entry: Any,
    *,
    module_path: Path | None,
    name: str | None = None,
    dotenv_files: Sequence[Path] = (),
    environ_secret_names: Sequence[str] = (),
) -> ModalPlan:
    """The plan for a registered entry (`TaskAppEntry` with a `modal` ModalDeploymentConfig)."""
    modal_cfg = getattr(entry, "modal", None)
    if modal_cfg is None:
        raise ValueError(f"task app {entry.app_id!r} has no Modal deployment settings")
    app_name = name or modal_cfg.app_name
    if not _APP_NAME.match(app_name):
        raise ValueError(
            f"Modal app name {app_name!r} is not valid: use letters, digits, '.', '_' or '-' (at most 64)"
        )
    module_path = module_path.resolve() if module_path is not None else None
    app_dir = module_path.parent if module_path is not None else Path.cwd()
    dirs: list[tuple[str, str]] = [(str(package_dir()), f"{REMOTE_ROOT}/synth_ai")]
    files: list[tuple[str, str]] = []
    if module_path is not None and app_dir.name in _INSTALL_DIR_NAMES:
        files.append((str(module_path), f"{REMOTE_ROOT}/task_app/{app_dir.name}/{module_path.name}"))
    elif module_path is not None:
        dirs.append((str(app_dir), f"{REMOTE_ROOT}/task_app/{app_dir.name}"))
    warnings: list[str] = []
    for local, remote in modal_cfg.extra_local_dirs:
        local_path = app_dir / Path(local).expanduser()  # relative paths are the app directory's
        if not local_path.is_dir():
            warnings.append(f"extra_local_dirs: {local_path} does not exist; left out of the image")
            continue
        if not str(remote).startswith("/"):
            raise ValueError(f"extra_local_dirs: the container path {remote!r} must be absolute")
        dirs.append((str(local_path.resolve()), str(remote)))
    for _, mount in modal_cfg.volume_mounts:
        if not str(mount).startswith("/"):
            raise ValueError(f"volume_mounts: the mount path {mount!r} must be absolute")
    pip = _dedupe([*runtime_requirements(), *modal_cfg.pip_packages])
    return ModalPlan(
        app_id=entry.app_id,
        app_name=app_name,
        module_path=module_path,
        python_version=str(modal_cfg.python_version),
        apt_packages=tuple(modal_cfg.apt_packages),
        pip_packages=tuple(pip),
        local_dirs=tuple(dirs),
        local_files=tuple(files),
        environment=_environment(modal_cfg.environment),
        secret_names=tuple(modal_cfg.secret_names),
        dotenv_files=tuple(Path(p).resolve() for p in dotenv_files),
        environ_secret_names=tuple(sorted(set(environ_secret_names))),
        volumes=tuple((str(n), str(p)) for n, p in modal_cfg.volume_mounts),
        timeout=int(modal_cfg.timeout),
        memory=int(modal_cfg.memory),
        cpu=float(modal_cfg.cpu),
        min_containers=int(modal_cfg.min_containers),
        max_containers=int(modal_cfg.max_containers),
        warnings=tuple(warnings),
    )


def _environment(pairs: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    checked = []
    for pair in pairs:
        name, value = pair if isinstance(pair, (tuple, list)) and len(pair) == 2 else (pair, None)
        problem = None
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            problem = f"{name!r} is not a variable name (letters, digits and '_', not first a digit)"
        elif not isinstance(value, str):
            problem = f"the value of {name} must be a string, not {type(value).__name__}"
        if problem:  # a ValueError: the deploy flow reports it as invalid input
            raise ValueError(f"environment: {problem}")
        checked.append((name, value))
    return tuple(checked)


def render_modal_script(plan: ModalPlan) -> str:
    """The Python source of the Modal app (deterministic: the same plan gives the same text)."""
    r = repr
    lines = [
        f'"""Modal app for the task app {plan.app_id!r}, generated by `synth-ai deploy`.',
        "",
        "Regenerated on every deploy: change the task app's ModalDeploymentConfig, not this file.",
        '"""',
        "",
        "import os",
        "import sys",
        "",
        "import modal",
        "",
        f"APP_NAME = {r(plan.app_name)}",
        f"TASK_APP_ID = {r(plan.app_id)}",
        f"REMOTE_ROOT = {r(REMOTE_ROOT)}",
        "# The module that registers the task app: in the container, and on the machine that deploys it.",
        f"TASK_APP_MODULE = {r(plan.remote_module_path)}",
        f"LOCAL_TASK_APP_MODULE = {r(str(plan.module_path) if plan.module_path is not None else None)}",
        f"MOUNT_IGNORE = {r(list(MOUNT_IGNORE))}",
    ]
    if plan.environment:
        lines += [
            "# Set in the container before the task app loads (settings, not secrets).",
            f"ENVIRONMENT = {r(dict(plan.environment))}",
        ]
    lines += [
        "",
        "image = (",
        f"    modal.Image.debian_slim(python_version={r(plan.python_version)})",
    ]
    if plan.apt_packages:
        lines.append(f"    .apt_install({', '.join(r(p) for p in plan.apt_packages)})")
    if plan.pip_packages:
        lines.append("    .pip_install(")
        lines += [f"        {r(p)}," for p in plan.pip_packages]
        lines.append("    )")
    for local, remote in plan.local_dirs:
        lines.append(f"    .add_local_dir({r(local)}, remote_path={r(remote)}, ignore=MOUNT_IGNORE)")
    for local, remote in plan.local_files:
        lines.append(f"    .add_local_file({r(local)}, remote_path={r(remote)})")
    secrets = [f"modal.Secret.from_name({r(n)})" for n in plan.secret_names]
    secrets += [f"modal.Secret.from_dotenv({r(str(p.parent))}, filename={r(p.name)})" for p in plan.dotenv_files]
    volumes = [f"{r(path)}: modal.Volume.from_name({r(name)}, create_if_missing=True)" for name, path in plan.volumes]
    lines += [")", ""]
    lines += [*_block("secrets = [", secrets, "]"), ""]
    if plan.environ_secret_names:
        lines += [
            "# Keys set in the deploying shell rather than in an env file: Modal reads their values at deploy time",
            "# (this block is skipped when the container imports this file; it already has them).",
            "if modal.is_local():",
            f"    secrets.append(modal.Secret.from_local_environ({r(list(plan.environ_secret_names))}))",
            "",
        ]
    lines += [*_block("volumes = {", volumes, "}"), ""]
    lines += [
        "app = modal.App(APP_NAME, image=image)",
        "",
        "",
        "@app.function(",
        f"    timeout={plan.timeout},",
        f"    memory={plan.memory},",
        f"    cpu={plan.cpu!r},",
        f"    min_containers={plan.min_containers},",
        f"    max_containers={plan.max_containers},",
        "    secrets=secrets,",
        "    volumes=volumes,",
        ")",
        f"@modal.concurrent(max_inputs={plan.concurrency})",
        "@modal.asgi_app()",
        f"def {plan.function_name}():",
        *(["    os.environ.update(ENVIRONMENT)"] if plan.environment else []),
        "    if REMOTE_ROOT not in sys.path:",
        "        sys.path.insert(0, REMOTE_ROOT)",
        "    from synth_ai.deploy.modal_runtime import task_app_asgi",
        "",
    ]
    if plan.module_path is None:
        lines.append("    return task_app_asgi(TASK_APP_ID, None)  # no module of its own: the image installs it")
    else:
        lines += ["    module = TASK_APP_MODULE if os.path.exists(TASK_APP_MODULE) else LOCAL_TASK_APP_MODULE",
                  "    return task_app_asgi(TASK_APP_ID, module)"]
    lines.append("")
    return "\n".join(lines)


def _block(opening: str, items: list[str], closing: str) -> list[str]:
    if not items:
        return [opening + closing]
    return [opening, *(f"    {item}," for item in items), closing]


def _dedupe(items: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        key = item.strip()
        if key and key not in seen:
            seen.add(key)
            out.append(key)
    return out
