"""What commands that read from a backend share: the `--backend`, `--env-file` and `--timeout` options, and opening
the API without starting the embedded backend (a read-only command never starts a server)."""

from __future__ import annotations

import typer


def backend_option() -> str:
    return typer.Option(None, "--backend", help="Backend base URL (default: BACKEND_BASE_URL, else the embedded "
                        "backend).")


def env_file_option() -> list[str]:
    return typer.Option(None, "--env-file", help=".env file to load (repeatable; first wins). Default: the "
                        "nearest .env walking up from the working directory.")


def timeout_option() -> float | None:
    return typer.Option(None, "--timeout", min=0.1, help="Give up after this many seconds, retries included (exit 7 "
                        "naming the URL that did not answer). Default: each call's own timeouts and retries.")


def set_timeout(api, timeout: float | None) -> None:
    """`--timeout`: one deadline for every later call of the command, as `--poll-timeout` is for `train`."""
    if timeout is not None:
        api.transport.set_deadline(timeout, f"--timeout {timeout:g} s")


def connect(out, backend: str | None, env_files: list[str] | None = None, timeout: float | None = None, *,
            autostart: bool = False):
    """The API of the command's backend; `autostart`: start the embedded backend when it is the target and none
    runs (commands that need what only the backend has: its models)."""
    from synth_ai.connect.embedded_backend import open_api
    from synth_ai.env.backend_url import resolve_backend
    from synth_ai.env.dotenv_files import load_command_env

    load_command_env(env_files)
    api, _ = open_api(resolve_backend(backend), say=out.info, autostart=autostart)
    set_timeout(api, timeout)
    return api
