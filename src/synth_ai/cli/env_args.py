"""`--env-args JSON`: the taskset config of a `verifiers:<target>` app, on every command that builds one.

The value is checked here (a JSON object) and handed on as `SYNTH_VERIFIERS_ENV_ARGS` before the app's entry is
resolved: the entry reads it, and what the app starts (uvicorn's reloader, a Modal image) inherits it. Whether
its fields fit the taskset's config is checked when the environment loads, with the key path named.
"""

from __future__ import annotations

import typer

from synth_ai.cli.clicklib import UsageError


def env_args_option():
    return typer.Option(None, "--env-args", metavar="JSON",
                        help="verifiers:<target> apps only: a JSON object of the environment's taskset config "
                             "fields (sets SYNTH_VERIFIERS_ENV_ARGS), e.g. '{\"split\": \"test\"}'.")


def apply_env_args(app_id: str | None, raw: str | None) -> None:
    """Validate `--env-args` and export it for the entry (nothing when it was not given)."""
    if raw is None:
        return
    import json
    import os

    from synth_ai.verifiers_app import ENV_ARGS_VAR, is_verifiers_id
    from synth_ai.verifiers_app.target import parse_env_args

    if not is_verifiers_id(app_id):
        which = f"'{app_id}'" if app_id else "the app found by discovery"
        raise UsageError(f"--env-args only applies to verifiers:<target> apps; {which} is not one.")
    os.environ[ENV_ARGS_VAR] = json.dumps(parse_env_args(raw), sort_keys=True)
