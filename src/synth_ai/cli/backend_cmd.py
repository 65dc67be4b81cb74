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
NNODES_HELP = ("Nodes a torchrun job spans (your own cluster; needs --executor torchrun and a data dir every node "
               "shares). Default: $SYNTH_AI_BACKEND_TORCHRUN_NNODES, else 1. See docs/scale.md.")
NODE_RANK_HELP = ("This node's rank, 0 .. nnodes-1: node 0 serves the API and launches jobs; the others serve "
                  "nothing and join each job node 0 launches. Default: $SYNTH_AI_BACKEND_TORCHRUN_NODE_RANK, else 0.")
MASTER_ADDR_HELP = ("Node 0's address that the other nodes reach (torchrun's rendezvous). Default: "
                    "$SYNTH_AI_BACKEND_TORCHRUN_MASTER_ADDR, else 127.0.0.1.")
MASTER_PORT_HELP = ("The rendezvous port on node 0. Default: $SYNTH_AI_BACKEND_TORCHRUN_MASTER_PORT, else 29500.")


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
        nnodes: int = typer.Option(None, "--nnodes", min=1, help=NNODES_HELP),
        node_rank: int = typer.Option(None, "--node-rank", min=0, help=NODE_RANK_HELP),
        master_addr: str = typer.Option(None, "--master-addr", help=MASTER_ADDR_HELP),
        master_port: int = typer.Option(None, "--master-port", min=1, max=65535, help=MASTER_PORT_HELP),
    ) -> None:
        """Run the backend (API and dashboard at /) in the foreground until Ctrl-C; with --node-rank > 0, a node
        that joins the torchrun jobs node 0 launches."""
        from synth_ai.backend.daemon import serve
        from synth_ai.backend.executors.torchrun_command import NodePlace
        from synth_ai.backend.server_settings import BackendSettings
        from synth_ai.errors import InvalidInputError

        out = output_of(ctx)
        settings = BackendSettings.load(host=host, port=port, traces=traces, executor=executor)
        place = NodePlace.from_flags(nnodes, node_rank, master_addr, master_port)
        if place.multi_node and settings.executor != "torchrun":
            raise InvalidInputError(f"--nnodes {place.nodes} needs the torchrun executor; this backend's is "
                                    f"{settings.executor}.", hint="Add `--executor torchrun` on every node.")
        if place.node_rank > 0:
            from synth_ai.backend.executors.node_follower import NodeFollower

            out.info(f"node {place.node_rank} of {place.nodes}: joins the jobs node 0 "
                     f"({place.master_addr}:{place.master_port}) launches; data dir {settings.data_dir}")
            NodeFollower(settings, place.node_rank).serve()
            return

        def ready(state: dict) -> None:
            from synth_ai.env.backend_keys import keys_path

            if out.json_mode:
                return
            out.info(f"synth-ai backend listening on {state['url']} (API base {state['api_base']})")
            out.info(f"data dir {settings.data_dir}; API keys in {keys_path(settings.data_dir)}; "
                     f"jobs run with the {settings.executor} executor")
            out.info("dashboard: run `synth-ai backend open` for a login link")

        serve(settings, log_level=log_level, on_ready=ready)

    @group.command("slurm")
    def slurm_cmd(
        ctx: typer.Context,
        config: str = typer.Option(..., "--config", help="Training TOML whose [compute] (nodes, gpu_count) sizes the "
                                   "allocation; the script trains it."),
        output: str = typer.Option(None, "--output", "-o", help="Write the script here (default: print it)."),
        data_dir: str = typer.Option(None, "--data-dir", help="SYNTH_AI_HOME of the run, on a filesystem every node "
                                     "shares. Default: this machine's data dir."),
        partition: str = typer.Option(None, "--partition", help="SLURM partition (#SBATCH --partition)."),
        time_limit: str = typer.Option("24:00:00", "--time", help="SLURM time limit, [days-]hours:minutes:seconds."),
        master_port: int = typer.Option(29500, "--master-port", min=1, max=65535, help=MASTER_PORT_HELP),
        json_flag: bool = json_option(),
    ) -> None:
        """Render a SLURM batch script that trains CONFIG across the nodes of one allocation (docs/scale.md)."""
        from pathlib import Path

        from synth_ai.backend.executors.slurm import render, request_from_config
        from synth_ai.config.toml_source import load_toml
        from synth_ai.env.paths import data_dir as default_data_dir
        from synth_ai.fsutil import atomic_write_text

        out = output_of(ctx, json_flag)
        request = request_from_config(load_toml(config), Path(data_dir) if data_dir else default_data_dir(),
                                      time=time_limit, partition=partition, master_port=master_port)
        script = render(request)
        if output:
            atomic_write_text(Path(output), script)
            Path(output).chmod(0o755)
        doc = {"nodes": request.nodes, "gpus_per_node": request.gpu_count, "config": str(request.config),
               "data_dir": str(request.data_dir), "output": str(Path(output).resolve()) if output else None,
               "script": script}

        def human(o) -> None:
            o.info(f"Wrote {doc['output']}: submit it with `sbatch {output}`." if output else script.rstrip("\n"))

        out.result(doc, human)

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
        from synth_ai.backend.server_settings import BackendSettings
        from synth_ai.connect.embedded_backend import start_embedded_backend

        out = output_of(ctx, json_flag)
        settings = BackendSettings.load(host=host, port=port, traces=traces, executor=executor)
        # --json: the moved port is the document's `port_taken`; stdout and stderr carry nothing else
        doc = start_embedded_backend(settings, (lambda _m: None) if out.json_mode else out.info, timeout=timeout)

        def human(o) -> None:
            verb = "already running" if doc.get("already_running") else "started"
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
