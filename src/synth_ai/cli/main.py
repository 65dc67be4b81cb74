"""Console entry point: the short path for a plain `files validate`, typer for everything else.

Both run inside the CLI's one error boundary (`synth_ai.cli.boundary`); click's own usage errors are rendered here
and exit 2. No user error ever shows a raw traceback.
"""

from __future__ import annotations

import sys

from synth_ai.cli.boundary import fail

# Only what every start needs is imported here: a plain `files validate` call runs without typer or rich
# (`synth_ai.cli.quick_validate`), so this module's imports are on its start-up path.


def _wants_json(argv: list[str]) -> bool:
    args = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in args


def main(argv: list[str] | None = None) -> int:
    """The console entry: a plain `files validate` call takes the short path, everything else typer's."""
    from synth_ai.cli.quick_validate import parse_validate_call

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:  # a bare `synth-ai` is a request for help, not a usage error (as with git, docker, uv)
        args = ["--help"]
    call = parse_validate_call(args)
    if call is not None:
        return call.run()
    return run_typer(args)


def run_typer(args: list[str]) -> int:
    """Every command through typer, inside the error boundary."""
    from synth_ai.cli import clicklib
    from synth_ai.cli.app import build_command
    from synth_ai.cli.output import Output

    output = Output(json_mode=_wants_json(args))
    command = build_command(args)
    try:
        result = command.main(args=args, prog_name="synth-ai", standalone_mode=False, obj=output)
        return int(result) if isinstance(result, int) else 0
    except clicklib.Exit as exc:
        return int(exc.exit_code)
    except clicklib.UsageError as exc:
        if output.json_mode:
            output.error(_usage_error(exc))
        else:
            exc.show()
        from synth_ai.errors import ExitCode

        return int(ExitCode.USAGE)
    except clicklib.ClickException as exc:
        from synth_ai.errors import ExitCode, SynthError

        output.error(SynthError(exc.format_message()))
        return int(ExitCode.USAGE if exc.exit_code == 2 else ExitCode.INTERNAL)
    except clicklib.Abort:
        return fail(KeyboardInterrupt(), output)
    except Exception as exc:
        return fail(exc, output)
    except KeyboardInterrupt as exc:
        return fail(exc, output)


def _usage_error(exc: object):
    from synth_ai.errors import ExitCode, SynthError

    err = SynthError(getattr(exc, "format_message")(), hint="Run the command with --help to see its options.")
    err.exit_code = ExitCode.USAGE
    err.code = "usage"
    return err
