"""`synth-ai deploy [APP_ID]` (Modal or uvicorn) and `synth-ai modal-serve [APP_ID]`."""

from __future__ import annotations

from enum import Enum
from typing import Any

import typer

from synth_ai.cli.app import json_option, output_of
from synth_ai.cli.clicklib import UsageError
from synth_ai.cli.env_args import apply_env_args, env_args_option

class Runtime(str, Enum):
    modal = "modal"
    uvicorn = "uvicorn"


class ModalMode(str, Enum):
    deploy = "deploy"
    serve = "serve"


MODAL_ONLY = ("name", "dry_run", "modal_cli", "modal_mode", "timeout")
UVICORN_ONLY = ("host", "port", "reload", "force", "trace", "trace_db")

_FLAGS = {
    "name": "--name", "dry_run": "--dry-run", "modal_cli": "--modal-cli", "modal_mode": "--modal-mode",
    "timeout": "--timeout", "host": "--host", "port": "--port", "reload": "--reload/--no-reload",
    "force": "--force/--no-force", "trace": "--trace", "trace_db": "--trace-db",
}


def user_supplied(ctx: Any, names: tuple[str, ...]) -> list[str]:
    """The flags among `names` that the user typed (or set through the environment), whatever their values.
    (Compared by name: Typer may carry its own copy of click's ParameterSource.)"""
    given = []
    for name in names:
        source = ctx.get_parameter_source(name)
        if getattr(source, "name", None) in ("COMMANDLINE", "ENVIRONMENT"):
            given.append(_FLAGS[name])
    return given


def check_runtime_flags(ctx: Any, runtime: str, modal_mode: str, dry_run: bool) -> None:
    """The 0.2.17 rules: flags of the other runtime are refused, as is --dry-run with --modal-mode=serve."""
    if runtime == "modal":
        wrong = user_supplied(ctx, UVICORN_ONLY)
        if wrong:
            raise UsageError(f"{', '.join(wrong)} cannot be used with --runtime=modal.")
        if modal_mode == "serve" and dry_run:
            raise UsageError("--dry-run is not supported with --modal-mode=serve.")
    else:
        wrong = user_supplied(ctx, MODAL_ONLY)
        if wrong:
            raise UsageError(f"{', '.join(wrong)} cannot be used with --runtime=uvicorn.")


def _timeout_option(serve: bool = False):
    what = ("for `modal serve` to print the app's URL" if serve
            else "for `modal deploy` to finish (with --modal-mode serve: for the URL)")
    return typer.Option(900.0, "--timeout", min=1.0, help=f"Seconds to wait {what} before stopping it.")


def _env_file_option():
    return typer.Option(
        None, "--env-file",
        help="Env file to load and attach to the app as a Modal secret (repeatable; the first also receives "
             "TASK_APP_URL). Default: the entry's env files, else the nearest .env.",
    )


def _modal_cli_option():
    return typer.Option("modal", "--modal-cli", help="The Modal CLI to run (a name on PATH or a path).")


def register(app: typer.Typer) -> None:
    @app.command("deploy")
    def deploy(
        ctx: typer.Context,
        app_id: str = typer.Argument(None, help="Task app id or alias (see `synth-ai task-app list`)."),
        runtime: Runtime = typer.Option(Runtime.modal, "--runtime",
                                        help="Where to run the app: on Modal, or here under uvicorn (= `serve`)."),
        name: str = typer.Option(None, "--name", help="Modal app name (default: the entry's app_name)."),
        dry_run: bool = typer.Option(False, "--dry-run",
                                     help="Print the generated Modal app and the command, run nothing."),
        modal_cli: str = _modal_cli_option(),
        modal_mode: ModalMode = typer.Option(ModalMode.deploy, "--modal-mode",
                                             help="`modal deploy` (persistent) or `modal serve` (ephemeral, hot reload)."),
        env_file: list[str] = _env_file_option(),
        timeout: float = _timeout_option(),
        host: str = typer.Option("127.0.0.1", "--host", help="uvicorn: interface to bind (0.0.0.0 exposes it)."),
        port: int = typer.Option(None, "--port", min=1, max=65535,
                                 help="uvicorn: port (default 8001)."),
        reload: bool = typer.Option(False, "--reload/--no-reload", help="uvicorn: reload on code changes."),
        force: bool = typer.Option(False, "--force/--no-force",
                                   help="uvicorn: stop synth-ai processes left on the port first (never another "
                                        "program)."),
        trace: str = typer.Option(None, "--trace", help="uvicorn: directory for rollout traces."),
        trace_db: str = typer.Option(None, "--trace-db", help="uvicorn: traces v3 SQLite database path."),
        env_args: str = env_args_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Deploy a task app to Modal (default), or serve it here with `--runtime uvicorn`."""
        out = output_of(ctx, json_flag)
        check_runtime_flags(ctx, runtime.value, modal_mode.value, dry_run)
        apply_env_args(app_id, env_args)
        if runtime is Runtime.uvicorn:
            from synth_ai.deploy.entries import serve_with_uvicorn

            serve_with_uvicorn(app_id, host=host, port=port, env_files=list(env_file or ()), reload=reload,
                               force=force, trace=trace, trace_db=trace_db, out=out)
            return
        _run_modal(out, app_id=app_id, mode=modal_mode.value, name=name, dry_run=dry_run, modal_cli=modal_cli,
                   env_files=env_file, timeout=timeout)

    @app.command("modal-serve")
    def modal_serve(
        ctx: typer.Context,
        app_id: str = typer.Argument(None, help="Task app id or alias."),
        modal_cli: str = _modal_cli_option(),
        name: str = typer.Option(None, "--name", help="Modal app name (default: the entry's app_name)."),
        env_file: list[str] = _env_file_option(),
        timeout: float = _timeout_option(serve=True),
        env_args: str = env_args_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Serve a task app on Modal with `modal serve` (ephemeral, hot reload) until Ctrl-C."""
        out = output_of(ctx, json_flag)
        apply_env_args(app_id, env_args)
        out.info(f"[modal-serve] requested app_id={app_id or '(auto)'} modal_cli={modal_cli}")
        _run_modal(out, app_id=app_id, mode="serve", name=name, dry_run=False, modal_cli=modal_cli,
                   env_files=env_file, timeout=timeout)


def _run_modal(out, *, app_id, mode, name, dry_run, modal_cli, env_files, timeout) -> None:
    from synth_ai.deploy.flow import ModalRequest, run

    request = ModalRequest(app_id=app_id, mode=mode, name=name, dry_run=dry_run, modal_cli=modal_cli,
                           env_files=list(env_files or ()), timeout_s=timeout)
    summary = run(request, out)

    def human(o) -> None:
        if summary.get("url"):
            o.info(f"✓ Task app URL: {summary['url']}")

    out.result(summary, human)
