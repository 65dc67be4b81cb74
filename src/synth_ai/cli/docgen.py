"""Generate docs/cli.md from the Typer app itself, so the reference cannot drift from the code.

    python -m synth_ai.cli.docgen            # print
    python -m synth_ai.cli.docgen --write    # rewrite docs/cli.md

A test fails when docs/cli.md differs from what this prints.
"""

from __future__ import annotations

import enum
import sys
import typing
from pathlib import Path

import typer

from synth_ai.errors import EXIT_CODE_MEANINGS

DOC_PATH = Path(__file__).resolve().parents[3] / "docs" / "cli.md"

INTRO = """# synth-ai command reference

Generated from the CLI by `python -m synth_ai.cli.docgen --write`; do not edit by hand (a test checks it).

Every command accepts the global `--json` flag before the command name (`synth-ai --json models list`), and
commands that print data also accept it after: with it, stdout carries exactly one JSON document (errors
included, as `{"error": {...}}`) and progress goes to stderr. `SYNTH_DEBUG=1` shows the traceback of an
unexpected error.
"""


def _option_row(param) -> str:
    """One table row for a Typer/click parameter (duck-typed: Typer may run on a vendored click)."""
    if param.param_type_name == "argument":
        name = f"`{(param.metavar or param.name).upper()}`"
        help_text = getattr(param, "help", None) or ""
        required = "required" if param.required else "optional"
        return f"| {name} (argument) | {required} | {_escape(help_text)} |"
    names = " / ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
    if param.multiple:
        names += " (repeatable)"
    type_text = _type_text(param)
    default = param.default
    if param.is_flag and not param.secondary_opts:
        default_text = ""
    elif default is None or default == () or default == []:
        default_text = ""
    else:
        default_text = f"default `{getattr(default, 'value', default)}`"
    detail = ", ".join(x for x in (type_text, default_text) if x)
    return f"| {names} | {_escape(detail)} | {_escape(param.help or '')} |"


def _type_text(param) -> str:
    """A short type name from click's `type` or, on Typer's vendored click, from the annotation."""
    if param.is_flag:
        return "flag"
    click_type = getattr(param, "type", None)
    if click_type is not None:
        choices = getattr(click_type, "choices", None)
        return "|".join(str(c) for c in choices) if choices else click_type.name.lower()
    annotation = param.type_descriptor.annotation
    for inner in typing.get_args(annotation) or (annotation,):
        if isinstance(inner, type) and issubclass(inner, enum.Enum):
            return "|".join(str(m.value) for m in inner)
        if inner in _TYPE_NAMES:
            return _TYPE_NAMES[inner]
    return "text"


_TYPE_NAMES = {str: "text", int: "integer", float: "float", bool: "boolean"}


def _escape(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _walk(command, ctx, out: list[str]) -> None:
    if ctx.parent is not None:
        out.append(f"## `{ctx.command_path}`\n")
        if command.help:
            out.append(" ".join(command.help.split()) + "\n")
        usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
        out.append(f"```\n{usage}\n```\n")
        params = [p for p in command.params if p.name != "help" and not getattr(p, "hidden", False)]
        if params:
            out.append("| option | type / default | description |")
            out.append("|---|---|---|")
            out.extend(_option_row(p) for p in params)
            out.append("")
    if hasattr(command, "commands"):
        for name in sorted(command.commands):
            sub = command.commands[name]
            if not getattr(sub, "hidden", False):
                _walk(sub, typer.Context(sub, info_name=name, parent=ctx), out)


def generate() -> str:
    from synth_ai.cli.app import build_command

    root = build_command()
    out = [INTRO, "## Global options\n", "| option | type / default | description |", "|---|---|---|"]
    out.extend(_option_row(p) for p in root.params if p.name != "help")
    out.append("")
    _walk(root, typer.Context(root, info_name="synth-ai"), out)
    out.append("## Exit codes\n")
    out.append("| code | meaning |")
    out.append("|---|---|")
    for code, meaning in EXIT_CODE_MEANINGS.items():
        out.append(f"| {int(code)} | {meaning} |")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = generate()
    if "--write" in args:
        DOC_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {DOC_PATH}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
