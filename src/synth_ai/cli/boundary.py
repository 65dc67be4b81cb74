"""The CLI's one error boundary: an exception becomes a message, a hint and its documented exit code.

Typed `SynthError`s keep their own exit code; Ctrl-C exits 130; a missing optional dependency is "unavailable";
anything else is a bug: a one-line message (exit 1) unless `SYNTH_DEBUG=1` asks for the traceback. Both paths of
the console entry (`main.run_typer` and the short `files validate` path in `quick_validate`) call `fail`, so this
module imports nothing heavy: it is on the short path's start-up.
"""

from __future__ import annotations

import os


def _debug() -> bool:
    return os.environ.get("SYNTH_DEBUG", "").strip().lower() in {"1", "true", "yes", "on"}


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
        from synth_ai.env.extras import pip_install

        output.error(
            UnavailableError(
                f"A dependency this command needs is not installed: {exc.name or exc}.",
                hint=f"Install the extra it belongs to, e.g. `{pip_install('train')} torch==2.13.0`.",
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


def _interrupted():
    from synth_ai.errors import ExitCode, SynthError

    err = SynthError("Interrupted.")
    err.exit_code = ExitCode.INTERRUPTED
    err.code = "interrupted"
    return err
