"""The Typer application: the root options and the list of command modules.

Command modules import only typer and the standard library at module level; everything heavier (pydantic,
httpx, fastapi, torch) is imported inside the command body, so `synth-ai --help` stays fast.
"""

from __future__ import annotations

import importlib

import typer

from synth_ai import COMPATIBLE_WITH, __version__
from synth_ai.cli.output import Output

# Each module defines `register(app)` and adds exactly the top-level commands listed with it (a test checks).
# Add an entry here to add commands. The order is the order of `synth-ai --help`.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "synth_ai.cli.demo_cmd": ("demo",),
    "synth_ai.cli.setup_cmd": ("setup",),
    "synth_ai.cli.train": ("train",),
    "synth_ai.cli.eval_cmd": ("eval",),
    "synth_ai.cli.jobs_cmd": ("jobs",),
    "synth_ai.cli.config_cmd": ("config",),
    "synth_ai.cli.models_cmd": ("models",),
    "synth_ai.cli.taskapp_cmd": ("serve", "task-app"),
    "synth_ai.cli.deploy_cmd": ("deploy", "modal-serve"),
    "synth_ai.cli.files_cmd": ("files",),
    "synth_ai.cli.filter_cmd": ("filter",),
    "synth_ai.cli.backend_cmd": ("backend",),
}


def modules_for(args: list[str] | None) -> list[str]:
    """The command modules a run needs: only the one owning the invoked command (each command module costs
    start-up time), or all of them for the root help and for an unknown command (whose error lists them all)."""
    name = next((a for a in args or [] if not a.startswith("-")), None)
    owners = [module for module, names in COMMAND_MODULES.items() if name in names]
    return owners or list(COMMAND_MODULES)


HELP = (
    "Train LLM agents with SFT and RL (GSPO) on Qwen3 and Qwen3-VL. "
    f"Interface-compatible with synth-ai {COMPATIBLE_WITH}; runs against an embedded backend by default."
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"synth-ai, version {__version__}")
        raise typer.Exit()


def build_app(args: list[str] | None = None) -> typer.Typer:
    """The app with the commands `args` needs (all of them when `args` is None)."""
    app = typer.Typer(
        name="synth-ai",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def root(
        ctx: typer.Context,
        json_output: bool = typer.Option(
            False, "--json", help="Print exactly one JSON document on stdout (errors included)."
        ),
        version: bool = typer.Option(
            False, "--version", callback=_version_callback, is_eager=True, help="Show the version and exit."
        ),
    ) -> None:
        output = ctx.obj if isinstance(ctx.obj, Output) else Output()
        if json_output:
            output.json_mode = True
        ctx.obj = output

    for module_name in modules_for(args) if args is not None else COMMAND_MODULES:
        importlib.import_module(module_name).register(app)
    return app


def build_command(args: list[str] | None = None):
    """The click command behind the app: for `args` only, or whole (what the docs generator walks)."""
    return typer.main.get_command(build_app(args))


def json_option() -> bool:
    """The per-command `--json` flag (same effect as the global one)."""
    return typer.Option(False, "--json", help="Print exactly one JSON document on stdout.")


def output_of(ctx: typer.Context, json_flag: bool = False) -> Output:
    """The output sink for this invocation (created by the root callback)."""
    root = ctx.find_root()
    if not isinstance(root.obj, Output):
        root.obj = Output()
    if json_flag:
        root.obj.json_mode = True
    return root.obj
