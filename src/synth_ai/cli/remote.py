"""What commands that read from a backend share: the `--backend` and `--env-file` options, and opening the API
without starting the embedded backend (a read-only command never starts a server)."""

from __future__ import annotations

import typer


def backend_option() -> str:
    return typer.Option(None, "--backend", help="Backend base URL (default: BACKEND_BASE_URL, else the embedded "
                        "backend).")


def env_file_option() -> list[str]:
    return typer.Option(None, "--env-file", help=".env file to load (repeatable; first wins). Default: the "
                        "nearest .env walking up from the working directory.")


def connect(out, backend: str | None, env_files: list[str] | None = None):
    from synth_ai.client.connect import open_api
    from synth_ai.env.backend_url import resolve_backend
    from synth_ai.env.dotenv_files import load_command_env

    load_command_env(env_files)
    api, _ = open_api(resolve_backend(backend), say=out.info, autostart=False)
    return api
