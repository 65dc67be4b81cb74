"""Console entry point and the CLI's single error boundary.

Typed `SynthError`s become a message, a hint and their documented exit code; click usage errors exit 2;
Ctrl-C exits 130; anything else is a bug: a one-line message (exit 1) unless `SYNTH_DEBUG=1` asks for the
traceback. No user error ever shows a raw traceback.
"""

from __future__ import annotations

import os
import sys

# Only what every start needs is imported here: a plain `files validate` call runs without typer or rich
# (`synth_ai.cli.quick_validate`), so this module's imports are on its start-up path.


def _wants_json(argv: list[str]) -> bool:
    args = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in args


def _debug() -> bool:
    return os.environ.get("SYNTH_DEBUG", "").strip().lower() in {"1", "true", "yes", "on"}


def main(argv: list[str] | None = None) -> int:
    """The console entry: a plain `files validate` call takes the short path, everything else typer's."""
    from synth_ai.cli.quick_validate import parse_validate_call

    args = list(sys.argv[1:] if argv is None else argv)
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


def fail(exc: BaseException, output) -> int:
    """The boundary for everything but click's own errors: render `exc` on `output`; return the exit code (or
    re-raise it under `SYNTH_DEBUG=1`). Shared by both paths of the console entry."""
    from synth_ai.errors import ExitCode, SynthError, UnavailableError

    if isinstance(exc, SynthError):
        output.error(exc)
        if _debug():
            raise exc
        return int(exc.exit_code)
    if isinstance(exc, KeyboardInterrupt):
        output.error(_interrupted())
        return int(ExitCode.INTERRUPTED)
    if _debug():
        raise exc
    if isinstance(exc, ImportError):
        output.error(
            UnavailableError(
                f"A dependency this command needs is not installed: {exc.name or exc}.",
                hint="Install the extra it belongs to, e.g. `pip install 'synth-ai[train]' torch==2.13.0`.",
            )
        )
        return int(ExitCode.UNAVAILABLE)
    output.error(
        SynthError(
            f"Internal error: {type(exc).__name__}: {exc}",
            hint="This is a bug in synth-ai. Re-run with SYNTH_DEBUG=1 to see the traceback and report it.",
        )
    )
    return int(ExitCode.INTERNAL)


def _usage_error(exc: object):
    from synth_ai.errors import ExitCode, SynthError

    err = SynthError(getattr(exc, "format_message")(), hint="Run the command with --help to see its options.")
    err.exit_code = ExitCode.USAGE
    err.code = "usage"
    return err


def _interrupted():
    from synth_ai.errors import ExitCode, SynthError

    err = SynthError("Interrupted.")
    err.exit_code = ExitCode.INTERRUPTED
    err.code = "interrupted"
    return err
