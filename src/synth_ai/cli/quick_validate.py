"""`synth-ai files validate` without typer: the same command, started in a fraction of the time.

Checking a file of tens of MB takes less time than importing typer, rich and the CLI's modules, so the console
entry (`main.main`) reads its arguments first: a plain validate call, `[--json] files validate PATH` with the
command's own options each given at most once as `--name value`, runs here with only the datasets package loaded.
Anything else (`--help`, `--name=value`, `-mNAME`, an unknown or repeated option, a value typer would refuse)
returns None and goes to typer, whose usage errors stay the only ones. The output and exit code are the command's:
both paths build the result with `report_document`/`render_report`, errors go through the one boundary
(`boundary.fail`), and lines are written without rich only where rich would write the same bytes (tests compare both
paths byte for byte).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from synth_ai.cli.output import Output
    from synth_ai.datasets.report import DatasetReport

# ExitCode.INVALID_INPUT; importing synth_ai.errors costs a start-up its dataclasses (a test keeps them equal).
INVALID_INPUT = 3

_FLAGS = {"--json": "json_mode", "--sha256": "sha256"}
# option -> (field, converter returning None for a value typer would refuse or read differently)
_VALUED = {
    "--model": ("model", lambda v: v),
    "-m": ("model", lambda v: v),
    "--min-messages": ("min_messages", lambda v: _count(v, 1)),
    "--max-errors": ("max_errors", lambda v: _count(v, 0)),
    "--max-image-mb": ("max_image_mb", lambda v: _megabytes(v)),
    "--workers": ("workers", lambda v: _count(v, 0)),
}


def _count(value: str, least: int) -> int | None:
    return int(value) if value.isascii() and value.isdigit() and int(value) >= least else None


def _megabytes(value: str) -> float | None:
    whole, _, fraction = value.partition(".")
    if not (whole + fraction).isascii() or not (whole + fraction).isdigit() or not whole:
        return None
    mb = float(value)
    return mb if mb >= 0.001 else None


class ValidateCall:
    """One `files validate` invocation, its options as typer would have read them."""

    def __init__(self) -> None:
        self.path: str | None = None
        self.json_mode = False
        self.model: str | None = None
        self.min_messages = 2
        self.max_errors = 20
        self.max_image_mb = 10.0
        self.sha256 = False
        self.workers = 0

    def run(self) -> int:
        """Validate and print, as the typer command does; return the exit code."""
        out = _PlainOutput(json_mode=self.json_mode)
        try:
            from synth_ai.datasets.validate import validate_jsonl

            report = validate_jsonl(self.path, model=self.model, min_messages=self.min_messages,
                                    max_errors=self.max_errors, max_image_bytes=int(self.max_image_mb * 2**20),
                                    sha256=self.sha256, workers=self.workers)
            out.result(report_document(report), lambda o: render_report(report, o))
        except (Exception, KeyboardInterrupt) as exc:  # the CLI's one boundary renders it
            from synth_ai.cli.boundary import fail

            return fail(exc, out)
        return 0 if report.ok else INVALID_INPUT


def parse_validate_call(args: list[str]) -> ValidateCall | None:
    """The call `args` make when they are a plain `files validate` (see the module's docstring), else None."""
    call = ValidateCall()
    at = 0
    while at < len(args) and args[at] == "--json":  # the root option
        call.json_mode = True
        at += 1
    if args[at:at + 2] != ["files", "validate"]:
        return None
    given: set[str] = set()
    rest = args[at + 2:]
    k = 0
    while k < len(rest):
        arg = rest[k]
        if arg in _FLAGS:
            setattr(call, _FLAGS[arg], True)
            k += 1
            continue
        if arg in _VALUED:
            field, convert = _VALUED[arg]
            if field in given or k + 1 >= len(rest) or rest[k + 1].startswith("-"):
                return None
            value = convert(rest[k + 1])
            if value is None:
                return None
            setattr(call, field, value)
            given.add(field)
            k += 2
            continue
        if arg.startswith("-") or call.path is not None:
            return None
        call.path = arg
        k += 1
    if call.path is None:
        return None
    # typer's Path argument refuses an unreadable existing file itself (a usage error); leave that to it.
    if os.path.exists(call.path) and not os.access(call.path, os.R_OK):
        return None
    return call


def report_document(report: DatasetReport) -> dict:
    """The `--json` document of a validation."""
    doc = report.to_dict()
    if not report.ok:
        from synth_ai.datasets.report import FIX_HINT

        doc["hint"] = FIX_HINT
    return doc


def render_report(report: DatasetReport, o: Output) -> None:
    """The human rendering of a validation."""
    if report.ok:
        o.info(f"✓ {report.path}: valid SFT dataset")
        o.info(f"  {report.summary_line()}")
        if report.sha256:
            o.info(f"  sha256 {report.sha256}")
    else:
        from synth_ai.datasets.report import FIX_HINT

        o.info("✗ " + report.render())
        o.info(f"Hint: {FIX_HINT}")
    for warning in report.warnings:
        o.warn(warning.render())
    if report.warnings_omitted:
        o.warn(f"... and {report.warnings_omitted:,} more warnings")


def _output_class() -> type:
    from synth_ai.cli.output import Output

    return Output


class _PlainOutput:
    """`Output`, writing a line itself where rich would write exactly its text and a newline (no style shown,
    nothing rich rewrites), else handing it to a real `Output` (which imports rich)."""

    def __init__(self, *, json_mode: bool) -> None:
        self.json_mode = json_mode
        self._rich: Output | None = None

    @property
    def rich(self) -> Output:
        if self._rich is None:
            self._rich = _output_class()(json_mode=self.json_mode)
        return self._rich

    def info(self, text: str) -> None:
        if not self._write_plain(text, stderr=self.json_mode, styled=False):
            self.rich.info(text)

    def warn(self, text: str) -> None:
        if not self._write_plain(f"warning: {text}", stderr=True, styled=True):
            self.rich.warn(text)

    def _write_plain(self, text: str, *, stderr: bool, styled: bool) -> bool:
        """Write `text` as rich would, if that is only its text and a newline; say whether it was written."""
        from synth_ai.env.secrets import redact

        stream = sys.stderr if stderr else sys.stdout
        line = redact(text)
        if not _printable(line) or (styled and _colours(stream)) or not _utf8(stream):
            return False
        stream.write(line + "\n")
        stream.flush()
        return True

    def result(self, data: dict, human) -> None:
        if self.json_mode:
            self.rich.result(data)  # JSON needs no rich: Output writes it itself
        else:
            human(self)

    def error(self, err) -> None:
        self.rich.error(err)


def _printable(text: str) -> bool:
    """No character that rich would drop, expand or treat specially (controls, tabs, odd separators)."""
    return all(line.isprintable() for line in text.split("\n"))


def _colours(stream) -> bool:
    """Would rich colour this stream? On a terminal, or when the environment forces it."""
    env = os.environ
    if env.get("FORCE_COLOR") or env.get("TTY_COMPATIBLE") or env.get("TTY_INTERACTIVE"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _utf8(stream) -> bool:
    """Text streams in memory (no encoding) and UTF-8 ones take any text; rich reports other encodings' errors."""
    encoding = getattr(stream, "encoding", None)
    return encoding is None or encoding.lower().replace("-", "") == "utf8"
