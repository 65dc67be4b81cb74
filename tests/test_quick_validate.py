"""The short path of `synth-ai files validate` (`synth_ai.cli.quick_validate`) against the typer command.

Both must print the same bytes and exit with the same code; everything but a plain validate call must still
reach typer; and the short path must not load what it exists to skip.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from synth_ai.cli.main import main, run_typer
from synth_ai.cli.quick_validate import INVALID_INPUT, parse_validate_call
from synth_ai.errors import ExitCode

PNG = b"\x89PNG\r\n\x1a\n" + bytes(3000)
GOOD_IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}
MISLABELLED = {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(PNG).decode()}}


def chat(*parts) -> str:
    return json.dumps({"messages": [{"role": "user", "content": list(parts) or "hi"},
                                    {"role": "assistant", "content": "ok"}]})


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("quick")
    made = {
        "good": [chat(), chat(GOOD_IMAGE), ""],
        "bad": [chat(), "{nope", json.dumps({"messages": [{"role": "user", "content": "x"}]}), *["{"] * 30],
        "warned": [chat(GOOD_IMAGE, GOOD_IMAGE), chat(MISLABELLED)] * 15,
        "empty": [],
    }
    out = {}
    for name, lines in made.items():
        path = root / f"{name}.jsonl"
        path.write_text("".join(line + "\n" for line in lines))
        out[name] = path
    out["dir"] = root
    out["missing"] = root / "missing.jsonl"
    return out


def run(entry, args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = entry(args)
    return code, out.getvalue(), err.getvalue()


CASES = [
    ["files", "validate", "{good}"],
    ["files", "validate", "{good}", "--sha256", "--json"],
    ["--json", "files", "validate", "{good}", "--workers", "1"],
    ["files", "validate", "{bad}"],
    ["files", "validate", "{bad}", "--json", "--max-errors", "3", "--min-messages", "1"],
    ["files", "validate", "{warned}", "--model", "Qwen/Qwen3-VL-2B-Instruct", "--max-errors", "4"],
    ["files", "validate", "{warned}", "-m", "Qwen/Qwen3-4B", "--json"],
    ["files", "validate", "{good}", "--model", "NoSuch/Model"],
    ["files", "validate", "{good}", "--max-image-mb", "0.001"],
    ["files", "validate", "{empty}"],
    ["files", "validate", "{missing}"],
    ["files", "validate", "{missing}", "--json"],
    ["files", "validate", "{dir}"],
]


@pytest.mark.parametrize("case", CASES, ids=[" ".join(c).replace("{", "").replace("}", "") for c in CASES])
def test_the_short_path_prints_what_typer_prints(files, case):
    args = [a.format(**files) for a in case]
    assert parse_validate_call(args) is not None  # the short path is taken
    quick = run(main, args)
    assert quick == run(run_typer, args)
    assert quick[0] in (0, ExitCode.INVALID_INPUT, ExitCode.NOT_FOUND)


def test_the_exit_code_for_an_invalid_file_is_the_documented_one():
    assert INVALID_INPUT == ExitCode.INVALID_INPUT


@pytest.mark.parametrize("rest", [
    ["--help"], ["-h"], ["x", "--model=Qwen/Qwen3-4B"], ["x", "-mQwen/Qwen3-4B"],
    ["x", "--workers", "1", "--workers", "2"],
    ["x", "--max-errors", "-1"], ["x", "--min-messages", "0"], ["x", "--max-image-mb", "1e3"],
    ["x", "--max-image-mb", "0.0001"], ["x", "--workers", "two"], ["x", "--unknown"], ["x", "y"], [], ["x", "--"],
    ["x", "--model"], ["-", "--json"],
])
def test_anything_but_a_plain_call_goes_to_typer(rest):
    assert parse_validate_call(["files", "validate", *rest]) is None


def test_other_commands_and_root_options_go_to_typer():
    for args in (["--version"], ["--help"], [], ["files", "list"], ["files", "--json", "validate", "x"],
                 ["validate", "x"], ["files"]):
        assert parse_validate_call(args) is None, args
    call = parse_validate_call(["--json", "files", "validate", "d.jsonl", "-m", "M", "--sha256", "--workers", "2",
                                "--max-image-mb", "2.5", "--max-errors", "0", "--min-messages", "3"])
    assert call is not None
    assert (call.path, call.json_mode, call.model, call.sha256, call.workers, call.max_image_mb, call.max_errors,
            call.min_messages) == ("d.jsonl", True, "M", True, 2, 2.5, 0, 3)


def test_help_and_usage_errors_still_come_from_typer(files):
    code, out, _ = run(main, ["files", "validate", "--help"])
    assert code == 0 and "Usage:" in out and "--max-image-mb" in out
    code, _, err = run(main, ["files", "validate", str(files["good"]), "--min-messages", "0"])
    assert code == ExitCode.USAGE and "Invalid value" in err


def _console(args: list[str], *, typer_only: bool = False, env: dict | None = None) -> subprocess.CompletedProcess:
    entry = "run_typer" if typer_only else "main"
    code = f"import sys; from synth_ai.cli.main import {entry}; sys.exit({entry}(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, env=env)


@pytest.mark.parametrize("extra", [[], ["--workers", "2"]], ids=["one-process", "forked"])
def test_as_a_process_the_short_path_loads_no_typer_rich_json_or_heavy_modules(files, extra):
    # json, re and enum cost more start-up than checking a 30 MB file (synth_ai.lean_json says why).
    probe = ("import sys; from synth_ai.cli.main import main; code = main(sys.argv[1:]); "
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'typer', 'click', 'rich', 'msgspec', "
             "'dataclasses', 'typing', 'pathlib', 'inspect', 'synth_ai.errors', 'json', 're', 'enum', "
             "'collections', 'multiprocessing', 'pickle', 'signal'}); "
             "print(heavy, file=sys.stderr); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe, "files", "validate", str(files["good"]), "--json", *extra],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "[]"
    assert json.loads(done.stdout)["ok"] is True


def test_as_a_process_both_paths_write_the_same_bytes(files):
    for args in (["files", "validate", str(files["good"])], ["files", "validate", str(files["bad"]), "--json"]):
        quick, full = _console(args), _console(args, typer_only=True)
        assert (quick.returncode, quick.stdout, quick.stderr) == (full.returncode, full.stdout, full.stderr), args


@pytest.mark.skipif(sys.platform != "linux", reason="a pseudo-terminal as on Linux")
def test_on_a_terminal_both_paths_write_the_same_bytes(files):
    # Warnings are yellow on a terminal: the short path hands those lines to rich and writes the rest itself.
    import pty

    def on_tty(typer_only: bool) -> bytes:
        entry = "run_typer" if typer_only else "main"
        code = f"import sys; from synth_ai.cli.main import {entry}; sys.exit({entry}(sys.argv[1:]))"
        pid, fd = pty.fork()
        if pid == 0:  # the child: stdout and stderr are the terminal
            os.execv(sys.executable, [sys.executable, "-c", code, "files", "validate", str(files["warned"]),
                                      "--model", "Qwen/Qwen3-VL-2B-Instruct", "--max-errors", "2"])
        got = b""
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            got += chunk
        os.waitpid(pid, 0)
        return got

    quick = on_tty(False)
    assert b"\x1b[33mwarning:" in quick and "✓".encode() in quick
    assert quick == on_tty(True)
