"""`synth-ai backend serve|start|stop|status`: the embedded learning API on this machine."""

from __future__ import annotations

import typer

from synth_ai.cli.app import json_option, output_of

HOST_HELP = "Interface to bind. 127.0.0.1 (default) keeps the backend private to this machine."
PORT_HELP = ("Port to listen on; an error when another program holds it. Default: $SYNTH_AI_BACKEND_PORT, else "
             "8000 when it is free and a free port otherwise (recorded in the data dir, where commands find it).")
TRACES_HELP = ("Trace database (SQLite file, or a folder of them) whose eval runs the dashboard shows; repeatable. "
               "Adds to $SYNTH_AI_BACKEND_TRACES and ./traces/v3.")
EXECUTOR_HELP = ("What runs jobs: local (one worker process), torchrun (N local processes: data-parallel SFT and "
                 "GSPO) or modal (Modal GPUs; needs `modal token set`). Default: $SYNTH_AI_BACKEND_EXECUTOR, else "
                 "local. See docs/scale.md.")


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="The embedded backend: the Synth learning API (files, SFT jobs, inference) on this machine.",
        no_args_is_help=True,
    )

    @group.command("serve")
    def serve_cmd(
        ctx: typer.Context,
        host: str = typer.Option("127.0.0.1", "--host", help=HOST_HELP),
        port: int = typer.Option(None, "--port", min=1, max=65535, help=PORT_HELP),
        log_level: str = typer.Option("info", "--log-level", help="uvicorn log level: debug, info, warning, error."),
        traces: list[str] = typer.Option(None, "--traces", help=TRACES_HELP),
        executor: str = typer.Option(None, "--executor", help=EXECUTOR_HELP),
    ) -> None:
        """Run the backend (API and dashboard at /) in the foreground until Ctrl-C."""
        from synth_ai.backend.daemon import serve
        from synth_ai.backend.server_settings import BackendSettings

        out = output_of(ctx)
        settings = BackendSettings.load(host=host, port=port, traces=traces, executor=executor)

        def ready(state: dict) -> None:
            from synth_ai.env.backend_keys import keys_path

            if out.json_mode:
                return
            out.info(f"synth-ai backend listening on {state['url']} (API base {state['api_base']})")
            out.info(f"data dir {settings.data_dir}; API keys in {keys_path(settings.data_dir)}; "
                     f"jobs run with the {settings.executor} executor")
            out.info("dashboard: run `synth-ai backend open` for a login link")

        serve(settings, log_level=log_level, on_ready=ready)

    @group.command("start")
    def start_cmd(
        ctx: typer.Context,
        host: str = typer.Option("127.0.0.1", "--host", help=HOST_HELP),
        port: int = typer.Option(None, "--port", min=1, max=65535, help=PORT_HELP),
        timeout: float = typer.Option(60.0, "--timeout", min=1, help="Seconds to wait for it to answer."),
        traces: list[str] = typer.Option(None, "--traces", help=TRACES_HELP),
        executor: str = typer.Option(None, "--executor", help=EXECUTOR_HELP),
        json_flag: bool = json_option(),
    ) -> None:
        """Start the backend in the background (pid and log under the data dir)."""
        from synth_ai.backend.daemon import moved_notice, start
        from synth_ai.backend.server_settings import BackendSettings

        out = output_of(ctx, json_flag)
        doc = start(BackendSettings.load(host=host, port=port, traces=traces, executor=executor), timeout=timeout)

        def human(o) -> None:
            verb = "already running" if doc.get("already_running") else "started"
            if doc.get("port_taken"):
                o.info(moved_notice(doc))
            o.info(f"Backend {verb} at {doc['url']} (pid {doc['pid']}).")
            o.info(f"Log: {doc['log_file']}  Keys: {doc['key_file']}")

        out.result(doc, human)

    @group.command("stop")
    def stop_cmd(ctx: typer.Context, json_flag: bool = json_option()) -> None:
        """Stop the background backend (running jobs resume from their checkpoints at the next start)."""
        from synth_ai.backend.daemon import stop
        from synth_ai.env.paths import data_dir

        out = output_of(ctx, json_flag)
        doc = stop(data_dir())

        def human(o) -> None:
            if doc["was_running"]:
                o.info(f"Backend stopped (pid {doc['pid']}{', forced' if doc.get('forced') else ''}).")
            else:
                o.info("No backend is running.")

        out.result(doc, human)

    @group.command("status")
    def status_cmd(ctx: typer.Context, json_flag: bool = json_option()) -> None:
        """Whether the backend runs, its URL and pid. Exits 10 (unavailable) when no backend answers."""
        from synth_ai.backend.daemon import status
        from synth_ai.env.paths import data_dir
        from synth_ai.errors import ExitCode

        out = output_of(ctx, json_flag)
        doc = status(data_dir())

        def human(o) -> None:
            if doc["running"]:
                health = "healthy" if doc["healthy"] else "not answering"
                o.info(f"Backend running at {doc['url']} (pid {doc['pid']}, {health}).")
            else:
                o.info("Backend not running. Start it with `synth-ai backend start`.")
            o.info(f"Data dir: {doc['data_dir']}  Keys: {doc['key_file']}")

        out.result(doc, human)
        if not (doc["running"] and doc["healthy"]):  # scripts test `synth-ai backend status` to decide to start one
            raise typer.Exit(int(ExitCode.UNAVAILABLE))

    @group.command("open")
    def open_cmd(
        ctx: typer.Context,
        no_browser: bool = typer.Option(False, "--no-browser", help="Only print the link; do not open a browser."),
        json_flag: bool = json_option(),
    ) -> None:
        """Print a one-time login link to the running backend's dashboard (valid 2 minutes, once) and open it."""
        from synth_ai.cli.dashboard_link import login_link, open_in_browser

        out = output_of(ctx, json_flag)
        doc = login_link()
        doc["opened"] = False if no_browser else open_in_browser(doc["url"])

        def human(o) -> None:
            o.info(f"Dashboard login link (one use, expires in {doc['expires_in']} s):")
            o.info(doc["url"])
            if doc["opened"]:
                o.info("Opened it in your browser.")

        out.result(doc, human)

    app.add_typer(group, name="backend")
