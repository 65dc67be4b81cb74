"""Console entry point and the CLI's single error boundary.

Typed `SynthError`s become a message, a hint and their documented exit code; click usage errors exit 2;
Ctrl-C exits 130; anything else is a bug: a one-line message (exit 1) unless `SYNTH_DEBUG=1` asks for the
traceback. No user error ever shows a raw traceback.
"""

from __future__ import annotations

import os
import sys

from synth_ai.cli.output import Output
from synth_ai.errors import ExitCode, SynthError, UnavailableError


def _wants_json(argv: list[str]) -> bool:
    args = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in args


def _debug() -> bool:
    return os.environ.get("SYNTH_DEBUG", "").strip().lower() in {"1", "true", "yes", "on"}


def main(argv: list[str] | None = None) -> int:
    from synth_ai.cli import clicklib
    from synth_ai.cli.app import build_command

    args = list(sys.argv[1:] if argv is None else argv)
    output = Output(json_mode=_wants_json(args))
    command = build_command(args)
    try:
        result = command.main(args=args, prog_name="synth-ai", standalone_mode=False, obj=output)
        return int(result) if isinstance(result, int) else 0
    except SynthError as err:
        output.error(err)
        if _debug():
            raise
        return int(err.exit_code)
    except clicklib.Exit as exc:
        return int(exc.exit_code)
    except clicklib.UsageError as exc:
        if output.json_mode:
            output.error(_usage_error(exc))
        else:
            exc.show()
        return int(ExitCode.USAGE)
    except clicklib.ClickException as exc:
        output.error(SynthError(exc.format_message()))
        return int(ExitCode.USAGE if exc.exit_code == 2 else ExitCode.INTERNAL)
    except (KeyboardInterrupt, clicklib.Abort):
        output.error(_interrupted())
        return int(ExitCode.INTERRUPTED)
    except ImportError as exc:
        if _debug():
            raise
        output.error(
            UnavailableError(
                f"A dependency this command needs is not installed: {exc.name or exc}.",
                hint="Install the extra it belongs to, e.g. `pip install 'synth-ai[train]' torch==2.13.0`.",
            )
        )
        return int(ExitCode.UNAVAILABLE)
    except Exception as exc:  # the boundary: a bug must still not dump a traceback on a user
        if _debug():
            raise
        output.error(
            SynthError(
                f"Internal error: {type(exc).__name__}: {exc}",
                hint="This is a bug in synth-ai. Re-run with SYNTH_DEBUG=1 to see the traceback and report it.",
            )
        )
        return int(ExitCode.INTERNAL)


def _usage_error(exc: object) -> SynthError:
    err = SynthError(getattr(exc, "format_message")(), hint="Run the command with --help to see its options.")
    err.exit_code = ExitCode.USAGE
    err.code = "usage"
    return err


def _interrupted() -> SynthError:
    err = SynthError("Interrupted.")
    err.exit_code = ExitCode.INTERRUPTED
    err.code = "interrupted"
    return err
