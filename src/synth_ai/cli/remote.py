"""What commands that read from a backend share: the `--backend` option and opening the API without starting the
embedded backend (a read-only command never starts a server)."""

from __future__ import annotations

import typer


def backend_option() -> str:
    return typer.Option(None, "--backend", help="Backend base URL (default: BACKEND_BASE_URL, else the embedded "
                        "backend).")


def connect(out, backend: str | None):
    from synth_ai.client.connect import open_api
    from synth_ai.env.backend_url import resolve_backend

    api, _ = open_api(resolve_backend(backend), say=out.info, autostart=False)
    return api
