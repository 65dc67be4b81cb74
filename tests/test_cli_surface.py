"""The CLI's shape: fast start without heavy imports, an up-to-date command reference, and the error boundary."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, run_cli

FORBIDDEN = ("torch", "transformers", "peft", "modal", "fastapi", "uvicorn", "verifiers")

_PROBE = """
import io, sys, contextlib
from synth_ai.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split('.')[0] in {forbidden!r})
print(code, ','.join(heavy))
"""


def _help_commands() -> list[list[str]]:
    """`--help` of the root and of every command and subcommand the app has."""
    from synth_ai.cli.app import build_command

    found: list[list[str]] = [["--help"]]

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            found.append([*path, name, "--help"])
            walk(sub, [*path, name])

    walk(build_command(), [])
    return found


@pytest.mark.parametrize("argv", _help_commands(), ids=lambda a: " ".join(a))
def test_help_imports_no_heavy_module(argv: list[str]) -> None:
    probe = _PROBE.format(forbidden=set(FORBIDDEN))
    result = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    code, heavy = result.stdout.strip().split(" ", 1) if " " in result.stdout.strip() else (result.stdout.strip(), "")
    assert code == "0"
    assert heavy == "", f"`synth-ai {' '.join(argv)}` imported {heavy}"


def test_cli_reference_is_current() -> None:
    from synth_ai.cli.docgen import DOC_PATH, generate

    assert DOC_PATH.read_text(encoding="utf-8") == generate(), (
        "docs/cli.md is stale: run `python -m synth_ai.cli.docgen --write`"
    )


def test_exit_code_table_is_documented() -> None:
    from synth_ai.errors import ExitCode

    text = (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for code in ExitCode:
        assert f"| {int(code)} |" in text


def test_version() -> None:
    from synth_ai import __version__

    result = run_cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"synth-ai, version {__version__}"


def test_unknown_option_is_a_usage_error() -> None:
    result = run_cli("train", "--no-such-flag")
    assert result.exit_code == 2
    assert "No such option" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_unknown_option_in_json_mode_is_one_document() -> None:
    result = run_cli("--json", "train", "--no-such-flag")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["error"]["code"] == "usage"
    assert doc["error"]["exit_code"] == 2


def test_unknown_stream_format_is_a_usage_error() -> None:
    result = run_cli("--json", "jobs", "events", "job_x", "--follow", "--stream-format", "charts")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["error"]["code"] == "usage" and "--stream-format" in doc["error"]["message"]


def test_user_error_has_message_hint_and_code() -> None:
    result = run_cli("models", "get", "Qwen/Qwen3-5B")
    assert result.exit_code == 3
    assert "Model 'Qwen/Qwen3-5B' is not supported" in result.stderr
    assert "Hint:" in result.stderr
    assert "Traceback" not in result.stderr


def test_internal_error_shows_no_traceback_unless_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    import synth_ai.models.registry as registry

    def broken(*_args, **_kwargs):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(registry, "resolve_model", broken)
    result = run_cli("models", "get", "Qwen/Qwen3-4B")
    assert result.exit_code == 1
    assert "Internal error: RuntimeError: simulated bug" in result.stderr
    assert "SYNTH_DEBUG=1" in result.stderr
    assert "Traceback" not in result.stderr
    monkeypatch.setenv("SYNTH_DEBUG", "1")
    with pytest.raises(RuntimeError, match="simulated bug"):
        run_cli("models", "get", "Qwen/Qwen3-4B")


def test_planted_secret_is_redacted_from_output(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk_live_planted_secret_value_1234567890"
    monkeypatch.setenv("SYNTH_API_KEY", secret)
    result = run_cli("--json", "train", "--dry-run", "--config",
                     str(REPO_ROOT / "examples" / "configs" / "sft_full_qwen3_4b.toml"),
                     "--dataset", str(REPO_ROOT / "examples" / "datasets" / "sft_math_small.jsonl"))
    assert result.exit_code == 0, result.stdout + result.stderr
    assert secret not in result.stdout + result.stderr
    upload = result.json()["requests"][0]
    assert upload["headers"]["Authorization"] == "Bearer sk_l…90"


def test_task_app_group_has_the_reference_subcommands() -> None:
    """synth-ai 0.2.17's `task-app` group: deploy, info, list, modal-serve, serve, validate."""
    from synth_ai.cli.app import build_command

    group = build_command().commands["task-app"]
    assert {"deploy", "info", "list", "modal-serve", "serve", "validate"} <= set(group.commands)
    dry = run_cli("task-app", "deploy", "math-single-step", "--dry-run", "--name", "surface-check")
    assert dry.exit_code == 0, dry.stdout + dry.stderr
    assert "modal deploy" in dry.stdout and "--name surface-check" in dry.stdout


def test_each_command_module_registers_exactly_its_listed_commands() -> None:
    """`synth-ai <command>` builds only the module listed as owning it, so the list must be right."""
    import importlib

    import typer

    from synth_ai.cli.app import COMMAND_MODULES, build_command

    for module, names in COMMAND_MODULES.items():
        app = typer.Typer()

        @app.callback()
        def root() -> None:  # keeps the app a group even with one command
            pass

        importlib.import_module(module).register(app)
        assert set(typer.main.get_command(app).commands) == set(names), module
    assert set(build_command().commands) == {n for names in COMMAND_MODULES.values() for n in names}


def test_a_command_run_builds_only_its_module() -> None:
    from synth_ai.cli.app import build_command

    assert set(build_command(["--json", "files", "validate", "x.jsonl"]).commands) == {"files"}
    assert set(build_command(["serve", "--help"]).commands) == {"serve", "task-app"}
    assert len(build_command(["--help"]).commands) > 5
    unknown = run_cli("no-such-command")
    assert unknown.exit_code == 2 and "No such command" in unknown.stderr


def test_models_list_still_lists_the_registry_when_the_configured_backend_is_unusable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import free_port

    monkeypatch.setenv("BACKEND_BASE_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("SYNTH_API_KEY", "sk_test_models_list_0000000000")
    result = run_cli("--json", "models", "list")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert any(m["id"] == "Qwen/Qwen3-4B" for m in result.json()["models"])
    assert "not listed" in result.stderr
    explicit = run_cli("models", "list", "--backend", f"http://127.0.0.1:{free_port()}")
    assert explicit.exit_code == 5
