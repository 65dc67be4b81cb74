"""`synth-ai serve [APP_ID]` and `synth-ai task-app serve|list|validate|info`."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer

from synth_ai.cli.app import json_option, output_of
from synth_ai.cli.env_args import apply_env_args, env_args_option

DEFAULT_INFO_BASE = "http://127.0.0.1:8001"
API_KEY_HELP = ("Key to present (default: ENVIRONMENT_API_KEY from the environment, else the nearest .env, else the "
                "one `synth-ai setup` saved).")


def _serve(ctx: typer.Context, app_id: str | None, host: str, port: int | None, env_file: list[str] | None,
           reload: bool, force: bool, trace: str | None, trace_db: str | None, env_args: str | None) -> None:
    from synth_ai.connect.env_key_share import share_for_serve
    from synth_ai.taskapp.serving import DEFAULT_PORT, serve_task_app

    out = output_of(ctx)
    apply_env_args(app_id, env_args)
    if port is None:
        port = DEFAULT_PORT
        if sys.stdin is not None and sys.stdin.isatty():
            port = int(typer.prompt("Port to serve on", default=DEFAULT_PORT))
    serve_task_app(app_id, host=host, port=port, env_files=env_file or [], reload=reload, force=force,
                   trace_dir=trace, trace_db=trace_db, echo=out.info, share_key=share_for_serve(out.info))


def _serve_command(group: typer.Typer, name: str) -> None:
    @group.command(name)
    def serve(
        ctx: typer.Context,
        app_id: str = typer.Argument(None, help="Task app id or alias (omit when only one app is found)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind; 0.0.0.0 exposes the app."),
        port: int = typer.Option(None, "--port", min=1, max=65535,
                                 help="Port (default 8001; asked for only on a terminal)."),
        env_file: list[str] = typer.Option(None, "--env-file", help="A .env file to load (repeatable; must exist)."),
        reload: bool = typer.Option(False, "--reload/--no-reload", help="Restart when the app's files change."),
        force: bool = typer.Option(False, "--force/--no-force",
                                   help="Stop synth-ai processes left listening on the port first (by pid); "
                                   "another program's port is never touched."),
        trace: str = typer.Option(None, "--trace", help="Record rollouts: directory for traces and SFT JSONL "
                                  "(database defaults to DIR/synth_ai.db)."),
        trace_db: str = typer.Option(None, "--trace-db", help="Record rollouts into this traces v3 SQLite file."),
        env_args: str = env_args_option(),
    ) -> None:
        """Serve a task app locally with uvicorn (nothing is sent anywhere)."""
        _serve(ctx, app_id, host, port, env_file, reload, force, trace, trace_db, env_args)


def register(app: typer.Typer) -> None:
    _serve_command(app, "serve")

    group = typer.Typer(help="Task apps: serve, deploy, list, validate, and query their task info.",
                        no_args_is_help=True)
    _serve_command(group, "serve")

    @group.command("list")
    def list_apps(ctx: typer.Context, json_flag: bool = json_option()) -> None:
        """List the task apps discovered (id, aliases, description)."""
        from synth_ai.taskapp.discovery import discover_task_apps

        out = output_of(ctx, json_flag)
        docs = [c.to_dict() for c in discover_task_apps()]

        def human(o) -> None:
            if not docs:
                o.info("No task apps registered.")
                return
            for d in docs:
                aliases = f" (aliases: {', '.join(d['aliases'])})" if d["aliases"] else ""
                o.info(f"- {d['id']}{aliases}: {d['description'] or '(no description)'}")
                o.info(f"    {d['path']}")

        out.result({"task_apps": docs}, human)

    @group.command("validate")
    def validate(
        ctx: typer.Context,
        app_id: str = typer.Argument(None, help="Task app to start in process and check (or use --url)."),
        url: str = typer.Option(None, "--url", help="Check an app already running at this base URL."),
        port: int = typer.Option(0, "--port", min=0, max=65535,
                                 help="Port for the in-process app (0: a free port)."),
        api_key: str = typer.Option(None, "--api-key", help=API_KEY_HELP),
        min_instances: int = typer.Option(10, "--min-instances", min=0,
                                          help="Seeds 0..N-1 must each yield a task instance."),
        timeout: float = typer.Option(10.0, "--timeout", min=0.1,
                                      help="Seconds per request; the task instances request gets this per seed."),
        inference_url: str = typer.Option(None, "--inference-url",
                                          help="With --model: run one real rollout against this model endpoint."),
        model: str = typer.Option(None, "--model", help="Model name for the real rollout."),
        seed: int = typer.Option(0, "--seed", help="Seed of the real rollout."),
        rollout_timeout: float = typer.Option(180.0, "--rollout-timeout", min=1.0,
                                              help="Seconds allowed for the real rollout."),
        verbose: bool = typer.Option(False, "-v", "--verbose", help="Show timings and URLs."),
        env_args: str = env_args_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Check a task app's routes, auth and answers against the contract (exit non-zero on any failure)."""

        out = output_of(ctx, json_flag)
        if bool(inference_url) != bool(model):
            raise typer.BadParameter("--inference-url and --model go together (both give a real rollout).",
                                     param_hint="'--inference-url/--model'")
        if url and app_id:
            raise typer.BadParameter("Pass either APP_ID (start it here) or --url (check a running app), not both.",
                                     param_hint="'APP_ID/--url'")
        if not url:
            apply_env_args(app_id, env_args)
        elif env_args is not None:
            raise typer.BadParameter("--env-args configures an app started here; with --url the app runs elsewhere.",
                                     param_hint="'--env-args'")
        kwargs = dict(timeout=timeout, min_instances=min_instances, inference_url=inference_url, model=model,
                      seed=seed, rollout_timeout=rollout_timeout)
        report = _validate_url(url, api_key, kwargs) if url else _validate_in_process(app_id, port, api_key, kwargs)
        _show_report(out, report, verbose)
        if not report.ok:
            raise typer.Exit(int(report.exit_code))

    @group.command("info")
    def info(
        ctx: typer.Context,
        app_id: str = typer.Argument(None, help="Task app to start in process and describe (default: ask the app "
                                     "at --base)."),
        base: str = typer.Option(None, "--base", help="Task app base URL (default: $TASK_APP_BASE_URL or "
                                 f"{DEFAULT_INFO_BASE})."),
        api_key: str = typer.Option(None, "--api-key", help=API_KEY_HELP),
        seed: list[int] = typer.Option(None, "--seed", help="A seed to describe (repeatable)."),
        timeout: float = typer.Option(10.0, "--timeout", min=0.1, help="Seconds to wait."),
        env_args: str = env_args_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Print a task app's /task_info (the taskset, or the instances for --seed values): of APP_ID started
        here, or of the app running at --base."""
        import json
        import os

        from synth_ai.taskapp.verify import check_task_info

        out = output_of(ctx, json_flag)
        if app_id and base:
            raise typer.BadParameter("Pass either APP_ID (start it here) or --base (ask a running app), not both.",
                                     param_hint="'APP_ID/--base'")
        if app_id:
            apply_env_args(app_id, env_args)
            with _app_in_process(app_id, 0, api_key) as (base_url, key, aliases):
                result = check_task_info(base_url, key, seeds=seed or [], timeout=timeout, aliases=aliases)
        else:
            if env_args is not None:
                raise typer.BadParameter("--env-args configures an app started here (APP_ID).",
                                         param_hint="'--env-args'")
            base_url = base or os.environ.get("TASK_APP_BASE_URL") or os.environ.get("TASK_APP_URL") or \
                DEFAULT_INFO_BASE
            key, aliases = _key_and_aliases(api_key)
            result = check_task_info(base_url, key, seeds=seed or [], timeout=timeout, aliases=aliases)
        if not result.ok:
            raise _check_error(result)
        out.result(result.data, lambda o: o.info(json.dumps(result.data, indent=2, sort_keys=True)))

    # The reference's `task-app` group also carries `deploy` and `modal-serve`: the same commands as the top level.
    from synth_ai.cli import deploy_cmd

    deploy_cmd.register(group)
    app.add_typer(group, name="task-app")


def _key_and_aliases(api_key: str | None) -> tuple[str, list[str]]:
    """The key to present: --api-key alone, or the ENVIRONMENT_API_KEY every command resolves alike (environment,
    nearest .env, setup's config.json), with ENVIRONMENT_API_KEY_ALIASES in X-API-Keys."""
    from synth_ai.env.environment_key import missing_key_hint, resolve_environment_key
    from synth_ai.errors import AuthError

    if api_key:
        return api_key, []
    key = resolve_environment_key()
    if key is None:
        raise AuthError("Missing API key. Provide --api-key or set ENVIRONMENT_API_KEY.",
                        hint=missing_key_hint())
    return key.value, list(key.aliases)


def _check_error(result):
    from synth_ai.errors import error_for_exit_code

    return error_for_exit_code(result.exit_code, result.message, details=result.to_dict())


def _validate_url(url: str, api_key: str | None, kwargs: dict):
    from synth_ai.taskapp.verify import verify_task_app

    key, aliases = _key_and_aliases(api_key)
    return verify_task_app(url, key, aliases=aliases, **kwargs)


def _validate_in_process(app_id: str | None, port: int, api_key: str | None, kwargs: dict):
    """Start the app in this process (uvicorn in a thread, on a free port unless --port) and check it."""
    from synth_ai.taskapp.verify import verify_task_app

    with _app_in_process(app_id, port, api_key) as (base_url, key, aliases):
        return verify_task_app(base_url, key, aliases=aliases, **kwargs)


@contextmanager
def _app_in_process(app_id: str | None, port: int, api_key: str | None) -> Iterator[tuple[str, str, list[str]]]:
    """The app running in this process (uvicorn in a thread, on a free port unless `port`): its URL and the key
    (with aliases) to present."""
    import os
    import secrets

    from synth_ai.env.environment_key import resolve_environment_key
    from synth_ai.taskapp.auth import allowed_environment_api_keys, normalize_environment_api_key
    from synth_ai.taskapp.server import create_task_app
    from synth_ai.taskapp.serving import resolve_entry, running_in_background
    from synth_ai.taskapp.tracing import TracingSettings

    entry = resolve_entry(app_id)
    normalize_environment_api_key(log=False)
    saved = os.environ.get("ENVIRONMENT_API_KEY")
    if not allowed_environment_api_keys():
        # The app runs here, for this check only: the key given or saved (the one presented), else a one-off key
        # rather than asking for one.
        resolved = None if api_key else resolve_environment_key()
        os.environ["ENVIRONMENT_API_KEY"] = api_key or (resolved.value if resolved else secrets.token_hex(16))
    try:
        key, aliases = _key_and_aliases(api_key)
        app = create_task_app(entry.config_factory(), tracing=TracingSettings.disabled())
        with running_in_background(app, port=port) as base_url:
            yield base_url, key, aliases
    finally:
        if saved is None:
            os.environ.pop("ENVIRONMENT_API_KEY", None)
        else:
            os.environ["ENVIRONMENT_API_KEY"] = saved


def _show_report(out, report, verbose: bool) -> None:
    def human(o) -> None:
        o.info(f"Validating task app at {report.base_url}")
        for number, check in enumerate(report.checks, start=1):
            mark = "✓" if check.ok else "✗"
            line = f"{number}. {mark} {check.name}: {check.message}"
            if verbose and check.elapsed_ms is not None:
                line += f" ({check.elapsed_ms} ms)"
            o.info(line)
            for warning in check.warnings:
                o.warn(f"{check.name}: {warning}")
        passed = sum(1 for c in report.checks if c.ok)
        o.info(f"{passed}/{len(report.checks)} checks passed" + ("" if report.ok else
                                                                 f"; exit code {int(report.exit_code)}"))

    out.result(report.to_dict(), human)
