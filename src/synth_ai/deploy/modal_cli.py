"""Running the `modal` CLI: finding it, running `modal deploy|serve` under a deadline, reading the app's URL.

- The CLI: `--modal-cli` when given (a path or a name on PATH); else `modal` on PATH; else `python -m modal` with
  this interpreter when the `modal` package is importable (`SYNTH_FORCE_MODAL_WRAPPER=1` forces that form).
- The subprocess runs in its own process group; its output is streamed line by line (through the output sink, so
  secrets are redacted) and its last lines are kept to explain a failure. On the deadline or Ctrl-C the group is
  signalled (SIGINT, then SIGTERM, then SIGKILL): the children of that one process and nothing else.
- The URL of a deployed app comes from Modal's Python API (`Function.from_name(app, fn).get_web_url()`), run in a
  subprocess under its own deadline. Only when that is impossible (no `modal` package here, or the lookup failed)
  do we fall back to the `=> https://….modal.run` line Modal prints for each web function; `modal serve` has no
  deployed app to ask, so that line is its only source.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from synth_ai.env.extras import pip_install
from synth_ai.errors import AuthError, DeadlineError, ServerError, UnavailableError

INSTALL_HINT = (
    f"Install the `modal` package (`{pip_install('modal')}`) or pass --modal-cli with the path to the "
    "Modal binary."
)
TOKEN_HINT = (
    "Run `modal token new` (or `modal token set --token-id … --token-secret …`), or set MODAL_TOKEN_ID and "
    "MODAL_TOKEN_SECRET in the environment or an --env-file, then retry."
)
# What Modal prints when it has no usable token (checked case-insensitively in the output's last lines).
_TOKEN_FAILURES = ("Token missing", "Could not authenticate client", "Token validation failed")
_URL_LINE = re.compile(r"=>\s*(https://[A-Za-z0-9.-]+\.modal\.run\S*)")
URL_LOOKUP_TIMEOUT_S = 60.0


def resolve_modal_command(modal_cli: str | None) -> list[str]:
    """The argv prefix that runs the Modal CLI. Raises UnavailableError (exit 10) when there is none."""
    if modal_cli:
        if os.sep in modal_cli or (os.altsep and os.altsep in modal_cli):
            if os.path.isfile(modal_cli) and os.access(modal_cli, os.X_OK):
                return [os.path.abspath(modal_cli)]
            raise UnavailableError(f"Modal CLI not found: {modal_cli} is not an executable file.", hint=INSTALL_HINT)
        found = shutil.which(modal_cli)
        if found:
            return [found]
        if modal_cli != "modal":
            raise UnavailableError(f"Modal CLI not found: no {modal_cli!r} on PATH.", hint=INSTALL_HINT)
    force_wrapper = os.environ.get("SYNTH_FORCE_MODAL_WRAPPER", "").strip().lower() in {"1", "true", "yes", "on"}
    if not force_wrapper:
        found = shutil.which("modal")
        if found:
            return [found]
    if importlib.util.find_spec("modal") is not None:
        return [sys.executable, "-m", "modal"]
    raise UnavailableError("Modal CLI not found: `modal` is not on PATH and the `modal` package is not installed.",
                           hint=INSTALL_HINT)


@dataclass
class RunResult:
    returncode: int
    tail: list[str] = field(default_factory=list)
    url: str | None = None  # from the `=>` line, when one was printed


def url_from_line(line: str) -> str | None:
    match = _URL_LINE.search(line)
    return match.group(1).rstrip(".,)") if match else None


def run_modal(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout_s: float | None,
    on_line: Callable[[str], None],
    stop_when_url: bool = False,
    tail_lines: int = 200,
) -> RunResult:
    """Run the Modal CLI, streaming its output. `timeout_s` bounds the whole run (None: no bound; for
    `modal serve`, the deadline applies until the URL is printed). Raises DeadlineError (exit 7) on the deadline."""
    try:
        proc = subprocess.Popen(
            list(argv), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, encoding="utf-8", errors="replace", bufsize=1, start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise UnavailableError(f"Modal CLI not found: {argv[0]} ({exc.strerror}).", hint=INSTALL_HINT) from exc
    except PermissionError as exc:
        raise UnavailableError(f"Modal CLI is not executable: {argv[0]}.", hint=INSTALL_HINT) from exc

    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw.rstrip("\n"))
        lines.put(None)

    reader = threading.Thread(target=pump, name="modal-output", daemon=True)
    reader.start()
    tail: deque[str] = deque(maxlen=tail_lines)
    url: str | None = None
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while True:
            try:
                line = lines.get(timeout=0.5)  # short waits keep Ctrl-C and the deadline responsive
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    _stop(proc)
                    raise DeadlineError(
                        f"`{' '.join(argv[-3:])}` did not finish within {timeout_s:g} s; it was stopped.",
                        hint="Pass a larger --timeout, or run with --dry-run and start the printed command yourself.",
                    ) from None
                continue
            if line is None:
                break
            tail.append(line)
            on_line(line)
            if url is None:
                url = url_from_line(line)
                if url is not None and stop_when_url:
                    deadline = None  # serving: the deadline covered start-up only
        proc.wait()
    except BaseException:
        _stop(proc)
        raise
    return RunResult(proc.returncode, list(tail), url)


def _stop(proc: subprocess.Popen[str]) -> None:
    """Stop the process group we started: SIGINT (Modal's own clean shutdown), SIGTERM, then SIGKILL."""
    if proc.poll() is not None:
        return
    for sig, grace in ((signal.SIGINT, 5.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def raise_for_failure(result: RunResult, *, command: str) -> None:
    """Turn a failed Modal run into the documented error: missing token (exit 4) or a failed command (exit 9)."""
    if result.returncode == 0:
        return
    text = "\n".join(result.tail)
    if any(marker.lower() in text.lower() for marker in _TOKEN_FAILURES):
        raise AuthError("Modal could not authenticate: no valid Modal token is configured.", hint=TOKEN_HINT)
    raise ServerError(
        f"Modal {command} exited with status {result.returncode}. Review the Modal output above or rerun with "
        "--dry-run.",
        hint="Run the printed `modal` command yourself to see the full error.",
    )


_LOOKUP = (
    "import json, sys\n"
    "import modal\n"
    "fn = modal.Function.from_name(sys.argv[1], sys.argv[2])\n"
    "print(json.dumps({'url': fn.get_web_url()}))\n"
)


def lookup_web_url(app_name: str, function_name: str, *, env: Mapping[str, str],
                   timeout_s: float = URL_LOOKUP_TIMEOUT_S) -> str | None:
    """The deployed web function's URL from Modal's API, or None when it cannot be asked here."""
    if importlib.util.find_spec("modal") is None:
        return None
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _LOOKUP, app_name, function_name], env=dict(env), capture_output=True,
            text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        return None
    for line in reversed(proc.stdout.splitlines()):
        try:
            url = json.loads(line).get("url")
        except (ValueError, AttributeError):
            continue
        return url if isinstance(url, str) and url.startswith("https://") else None
    return None
