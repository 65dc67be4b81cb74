"""`synth-ai setup`: get keys (hosted handshake, or local keys with `--local`), save them, say what changed.

Both paths check the files they will write before doing anything else (a broken `config.json` or a `.env` that is
not UTF-8 stops the command before the user approves a request in the browser), print every change with masked
values, and return one summary document (masked) for `--json`. Nothing here prompts unless the caller passes
`confirm`, which the CLI does only on a terminal.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from synth_ai.env.env_writer import FileUpdate, check_env_file, display_path
from synth_ai.env.secrets import mask_secret
from synth_ai.setup.credentials import config_path, default_env_file, existing_keys, read_config, save_credentials

if TYPE_CHECKING:
    import httpx


class Output(Protocol):
    """What setup writes through. The CLI passes its `cli.output.Output`; named here because flows sit below the CLI
    and do not import it."""

    def info(self, text: str) -> None: ...
    def note(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...
    def result(self, data: Any, human: Callable[[Output], None] | None = None) -> None: ...


@dataclass(frozen=True)
class SetupOptions:
    local: bool = False
    dev: bool = False
    origin: str | None = None
    env_file: Path | None = None
    open_browser: bool = True
    timeout: float | None = None  # seconds to wait for approval (default: until the device code expires)
    force: bool = False  # --local: replace a SYNTH_API_KEY the embedded backend did not make


def run_setup(options: SetupOptions, out: Output, *, confirm: Callable[[str], bool] | None = None,
              http: httpx.Client | None = None, sleep: Callable[[float], None] | None = None,
              clock: Callable[[], float] | None = None,
              browser: Callable[[str], bool] | None = None) -> dict[str, Any]:
    env_file = (options.env_file.expanduser() if options.env_file else default_env_file())
    check_env_file(env_file)
    config_file = config_path()
    read_config(config_file)
    if options.env_file is None:
        _note_shadowing(env_file, out)
    if options.local:
        return _run_local(options, out, env_file, config_file, confirm)
    return _run_hosted(options, out, env_file, config_file, http=http, sleep=sleep, clock=clock, browser=browser)


def _run_hosted(options: SetupOptions, out: Output, env_file: Path, config_file: Path, *,
                http: httpx.Client | None, sleep: Callable[[float], None] | None,
                clock: Callable[[], float] | None, browser: Callable[[str], bool] | None) -> dict[str, Any]:
    from synth_ai.setup.handshake import Handshake, open_in_browser, resolve_origin

    origin = resolve_origin(options.origin, dev=options.dev)
    if origin.url.startswith("http://") and not origin.loopback:
        out.warn(f"{origin.url} is plain http: your keys would cross the network unencrypted. Use https.")
    out.info(f"Connecting to {origin.url} to fetch your Synth credentials")
    with Handshake(origin.url, http=http, sleep=sleep, clock=clock) as handshake:
        code = handshake.start()
        out.info(f"Open this page to approve access: {code.verification_uri}")
        if code.user_code:
            out.info(f"and check that it shows the code {code.user_code}")
        if options.open_browser and (browser or open_in_browser)(code.verification_uri):
            out.info("(opened in your browser)")
        wait = code.expires_in if options.timeout is None else min(options.timeout, code.expires_in)
        out.info(f"Waiting for approval (up to {_duration(wait)}; Ctrl-C to stop)...")
        creds = handshake.wait(code, timeout=options.timeout)
    out.info(f"Connected to {creds.organization}")
    values = creds.values()
    if "ENVIRONMENT_API_KEY" not in values:
        out.warn("The website returned no ENVIRONMENT_API_KEY (keys.rl_env). Task apps need one: add "
                 "ENVIRONMENT_API_KEY=<any long random string> to your .env.")
    updates = save_credentials(values, env_file=env_file, config_file=config_file)
    keys = [{"name": name, "value": mask_secret(value), "action": "received"} for name, value in values.items()]
    summary = _summary("hosted", keys, updates, origin={"url": origin.url, "source": origin.source},
                       organization=creds.organization)
    _warn_shadowed_by_environment(values, env_file, out)
    out.result(summary, lambda o: _render(o, updates, next_step=(
        "Next: `synth-ai train --config <file> --backend <hosted URL>` (or set BACKEND_BASE_URL).")))
    return summary


def _run_local(options: SetupOptions, out: Output, env_file: Path, config_file: Path,
               confirm: Callable[[str], bool] | None) -> dict[str, Any]:
    from synth_ai.env import backend_keys as auth
    from synth_ai.setup.local_keys import ForeignKeyError, plan_local_keys, register_local_keys

    if options.dev or options.origin or options.timeout is not None or not options.open_browser:
        out.note("--local talks to no website: --dev, --origin, --timeout and --no-browser are ignored.")
    existing = existing_keys(env_file, config_file)
    labels = {"env_file": display_path(env_file), "config": display_path(config_file)}
    try:
        keys = plan_local_keys(existing, labels=labels, replace_foreign=options.force)
    except ForeignKeyError as err:
        if confirm is None or not confirm(f"{err.message} Replace it?"):
            raise
        keys = plan_local_keys(existing, labels=labels, replace_foreign=True)
    updates = save_credentials(keys.values(), env_file=env_file, config_file=config_file)
    register_local_keys(keys)
    data_dir = auth.keys_path().parent
    summary = _summary("local", [keys.synth.to_dict(), keys.environment.to_dict()], updates,
                       backend={"key_file": str(auth.keys_path()), "env_key_file": str(data_dir / auth.ENV_KEYS_FILE)})
    summary["unchanged"] = not summary["changed"] and all(k.action == "reused" for k in (keys.synth, keys.environment))
    _warn_shadowed_by_environment(keys.values(), env_file, out)

    def human(o: Output) -> None:
        for key in (keys.synth, keys.environment):
            what = {"reused": "already registered with the embedded backend",
                    "registered": "registered with the embedded backend",
                    "created": "created and registered with the embedded backend"}[key.action]
            o.info(f"{key.name}={mask_secret(key.value)}: {what}")
        _render(o, updates, next_step=(
            "Already set up: nothing changed." if summary["unchanged"] else
            "Next: `synth-ai backend start` (a running backend accepts the key at once), then `synth-ai train`."))

    out.result(summary, human)
    return summary


def _summary(mode: str, keys: list[dict[str, str]], updates: list[FileUpdate], **extra: Any) -> dict[str, Any]:
    return {"mode": mode, **extra, "keys": keys, "files": [u.to_dict() for u in updates],
            "changed": any(u.changed for u in updates)}


def _render(o: Output, updates: list[FileUpdate], *, next_step: str) -> None:
    for update in updates:
        for line in update.lines():
            o.info(line)
    o.info(next_step)


def _note_shadowing(env_file: Path, out: Output) -> None:
    """Creating ./.env hides a .env in a parent folder (only the nearest one is loaded): say so."""
    from synth_ai.env.dotenv_files import find_nearest_env

    if env_file.exists():
        return
    nearest = find_nearest_env(env_file.parent)
    if nearest is not None:
        out.note(f"Creating {display_path(env_file)}; commands run from here will load it instead of {nearest} "
                 "(only the nearest .env is read). Pass --env-file to write there instead.")


def _warn_shadowed_by_environment(values: dict[str, str], env_file: Path, out: Output) -> None:
    for name, value in values.items():
        current = os.environ.get(name, "").strip()
        if current and current != value:
            out.warn(f"{name} is also set in your environment ({mask_secret(current)}), which takes precedence over "
                     f"{display_path(env_file)}: unset it (`unset {name}`) or update it.")


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"
