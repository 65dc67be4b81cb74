"""`synth-ai deploy --runtime modal` and `synth-ai modal-serve`: from a task-app id to a running Modal app.

Steps: find the entry (discovery, aliases honoured) → pick env files → check ENVIRONMENT_API_KEY → plan and write
the Modal app source (`~/.synth-ai/modal/<app name>_modal.py`) → `--dry-run` stops here, printing the source and
the exact command → run `modal deploy|serve` under a deadline → read the URL → save `TASK_APP_URL` to the env
file.

After a successful deploy (or once `modal serve` is up) the app's ENVIRONMENT_API_KEY is shared, sealed, with the
backend `train` would use, as synth-ai 0.2.17's preflight did, but never with an unconfigured hosted default, never
on `--dry-run`, and a failure only warns. See docs/decisions/deploy.md.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.deploy.modal_cli import (
    lookup_web_url,
    raise_for_failure,
    resolve_modal_command,
    run_modal,
    url_from_line,
)
from synth_ai.deploy.modal_script import ModalPlan, plan_for_entry, render_modal_script
from synth_ai.env.dotenv_files import find_nearest_env, load_env_files
from synth_ai.env.env_writer import check_env_file, set_env_values
from synth_ai.env.environment_key import KEY_NAMES, adopt_environment_key
from synth_ai.env.paths import data_path
from synth_ai.errors import AuthError, InvalidInputError, SynthError

DEFAULT_TIMEOUT_S = 900.0

# Keys passed to the container when they are set in this process but come from no env file (0.2.17 "inlined"
# these). Only their names are written into the generated source; Modal reads the values at deploy time.
ENVIRON_SECRET_NAMES: tuple[str, ...] = (
    "ENVIRONMENT_API_KEY", "DEV_ENVIRONMENT_API_KEY", "ENVIRONMENT_API_KEY_ALIASES", "GROQ_API_KEY", "OPENAI_API_KEY",
)
URL_KEYS = ("TASK_APP_URL",)


@dataclass
class ModalRequest:
    app_id: str | None
    mode: str = "deploy"  # "deploy" | "serve"
    name: str | None = None
    dry_run: bool = False
    modal_cli: str | None = None
    env_files: Sequence[str] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S


def prepare(request: ModalRequest, out: Any) -> tuple[ModalPlan, list[Path], dict[str, str], Path]:
    """Resolve the entry, the env files and the plan, and write the generated source. No network."""
    from synth_ai.deploy.entries import resolve_entry

    entry, module_path = resolve_entry(request.app_id)
    if getattr(entry, "modal", None) is None:
        raise InvalidInputError(
            f"Task app '{entry.app_id}' does not define Modal deployment settings.",
            hint="Add modal=ModalDeploymentConfig(app_name=…) to its TaskAppEntry, or use --runtime uvicorn.",
        )
    app_dir = module_path.parent if module_path is not None else Path.cwd()
    env_files = resolve_env_files(request.env_files, entry.env_files, app_dir)
    if env_files:
        out.info("Using env file(s): " + ", ".join(str(p) for p in env_files))
        out.note("every variable in these files is attached to the Modal app as a secret (values are not shown).")
    else:
        out.note("No env file found (pass --env-file); secrets come from this process's environment only.")
    file_values: dict[str, str] = {}
    load_env_files(env_files, environ=file_values)  # earlier files win
    if not any(file_values.get(n) for n in KEY_NAMES):
        # the environment's key, else the one `setup` saved (config.json), passed on by name like the environment's
        adopt_environment_key(env_files)
    environ_names = [n for n in ENVIRON_SECRET_NAMES if os.environ.get(n, "").strip() and not file_values.get(n)]
    has_key = any(file_values.get(n) or os.environ.get(n, "").strip() for n in KEY_NAMES)
    if not has_key:
        message = "ENVIRONMENT_API_KEY is not set: the deployed task app would refuse every request (503)."
        hint = "Add ENVIRONMENT_API_KEY=<key> to your .env (or pass --env-file), or run `synth-ai setup`."
        named = list(entry.modal.secret_names)
        if named:  # a named Modal secret may carry it; we cannot look inside without the network
            out.warn(f"ENVIRONMENT_API_KEY is not set here; make sure one of the Modal secrets {named} provides it.")
        elif not request.dry_run:
            raise AuthError(message, hint=hint)
        else:
            out.warn(message)
    try:
        plan = plan_for_entry(entry, module_path=module_path, name=request.name, dotenv_files=env_files,
                              environ_secret_names=environ_names)
    except ValueError as exc:
        raise InvalidInputError(str(exc), hint="Fix the entry's ModalDeploymentConfig (or --name).") from exc
    for warning in plan.warnings:
        out.warn(warning)
    script_path = data_path("modal", f"{plan.app_name}_modal.py")
    script_path.write_text(render_modal_script(plan), encoding="utf-8")
    return plan, env_files, file_values, script_path


def modal_command(prefix: Sequence[str], plan: ModalPlan, script_path: Path, mode: str) -> list[str]:
    argv = [*prefix, mode, str(script_path)]
    if mode == "deploy":
        argv += ["--name", plan.app_name]
    return argv


def run(request: ModalRequest, out: Any) -> dict[str, Any]:
    """Deploy or serve on Modal (or, with `dry_run`, only show how); returns the command's result document."""
    plan, env_files, file_values, script_path = prepare(request, out)
    source = plan.module_path or "the image's installed packages"
    if request.mode == "serve":
        out.info(f"[modal-serve] serving entry {plan.app_id} from {source}")
    else:
        out.info(f"[deploy] deploying entry {plan.app_id} from {source} as Modal app {plan.app_name}")
    summary: dict[str, Any] = {
        "app_id": plan.app_id, "app_name": plan.app_name, "mode": request.mode, "script_path": str(script_path),
        "env_files": [str(p) for p in env_files], "secret_names": list(plan.secret_names),
        "environ_secret_names": list(plan.environ_secret_names), "dry_run": request.dry_run,
    }
    if request.dry_run:
        return _dry_run(request, plan, script_path, summary, out)
    return _execute(request, plan, env_files, file_values, script_path, summary, out)


def _dry_run(request: ModalRequest, plan: ModalPlan, script_path: Path, summary: dict[str, Any],
             out: Any) -> dict[str, Any]:
    try:
        prefix = resolve_modal_command(request.modal_cli)
    except SynthError as exc:  # a dry run still shows what would run
        out.warn(f"{exc.message} The command below names it as given.")
        prefix = [request.modal_cli or "modal"]
    argv = modal_command(prefix, plan, script_path, request.mode)
    source = script_path.read_text(encoding="utf-8")
    summary.update(command=argv, source=source)
    if not out.json_mode:
        out.info(f"# --- {script_path} ---")
        out.info(source)
        out.info(f"Dry run: {shlex.join(argv)}")
    return summary


def _execute(request: ModalRequest, plan: ModalPlan, env_files: list[Path], file_values: dict[str, str],
             script_path: Path, summary: dict[str, Any], out: Any) -> dict[str, Any]:
    argv = modal_command(resolve_modal_command(request.modal_cli), plan, script_path, request.mode)
    target = env_files[0] if env_files else Path.cwd() / ".env"
    check_env_file(target)  # fail before deploying, not after, when the URL could not be saved
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for key, value in file_values.items():
        if not child_env.get(key):
            child_env[key] = value
    out.info(f"[modal-exec] {shlex.join(argv)}")
    saved: list[dict[str, Any]] = []

    def on_line(line: str) -> None:
        out.info(line)
        if request.mode == "serve" and not saved:
            url = url_from_line(line)
            if url:  # `modal serve` keeps running: save the URL as soon as it is printed
                saved.extend(_save_url(target, url, out))

    result = run_modal(argv, env=child_env, timeout_s=request.timeout_s, on_line=on_line,
                       stop_when_url=request.mode == "serve")
    raise_for_failure(result, command=request.mode)
    summary["command"] = argv
    summary["env_key_shared"] = _share_key(file_values, out)
    url = result.url
    if request.mode == "deploy":
        url = lookup_web_url(plan.app_name, plan.function_name, env=child_env)
        summary["url_source"] = "modal_api"
        if url is None and result.url:
            url, summary["url_source"] = result.url, "modal_output"
        if url is None:
            summary.pop("url_source")
            out.warn("Deployed, but the app's URL could not be read; find it with `modal app list` and set "
                     "TASK_APP_URL yourself.")
        else:
            saved.extend(_save_url(target, url, out))
    summary["url"] = url
    summary["env_changes"] = saved
    return summary


def _share_key(file_values: dict[str, str], out: Any) -> str:
    """Hand the deployed app's key, sealed, to the backend `train` would use (warn-only: the app is deployed
    either way, and `train` shares the key again before creating a job)."""
    from synth_ai.connect.env_key_share import share_environment_key

    key = next((v for n in KEY_NAMES for v in (file_values.get(n), os.environ.get(n, "").strip()) if v), None)
    result = share_environment_key(key, say=out.info, warn=out.warn)
    if result.status == "skipped":
        out.note(f"[preflight] {result.message}")
    return result.status


def resolve_env_files(explicit: Sequence[str], entry_env_files: Sequence[str], app_dir: Path) -> list[Path]:
    """Every `--env-file` (each must exist); else the entry's own `env_files` that exist (relative ones from the
    app's directory); else the nearest `.env` walking up from the working directory, then from the app's."""
    if explicit:
        paths = []
        for raw in explicit:
            path = Path(raw).expanduser()
            if not path.is_file():
                raise InvalidInputError(f"Env file not found: {path}",
                                        hint="Pass an existing file to --env-file, or leave the flag out to use "
                                             "the nearest .env.")
            paths.append(path.resolve())
        return list(dict.fromkeys(paths))
    declared = [(app_dir / Path(p).expanduser()).resolve() for p in entry_env_files]
    declared = [p for p in declared if p.is_file()]
    if declared:
        return list(dict.fromkeys(declared))
    for start in (Path.cwd(), app_dir):
        found = find_nearest_env(start)
        if found is not None:
            return [found.resolve()]
    return []


def _save_url(path: Path, url: str, out: Any) -> list[dict[str, Any]]:
    update = set_env_values(path, {key: url for key in URL_KEYS})
    for line in update.lines():
        out.info(line)
    return [update.to_dict()]
