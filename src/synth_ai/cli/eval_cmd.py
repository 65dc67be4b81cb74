"""`synth-ai eval [APP_ID]`: roll a model out on a task app's seeds, score each, store the traces."""

from __future__ import annotations

import typer

from synth_ai.cli.app import json_option, output_of


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_(
        ctx: typer.Context,
        app_id: str = typer.Argument(None, help="Task app id or alias (default: [eval].app_id, or the only app "
                                     "found)."),
        app_id_option: str = typer.Option(None, "--app-id", help="Task app id (the product docs' spelling of the "
                                          "APP_ID argument)."),
        config: str = typer.Option(None, "--config", help="Eval TOML ([eval] table or the whole file; default: the "
                                   "first eval config found under the working directory)."),
        model: str = typer.Option(None, "--model", help="Model to evaluate (overrides [eval].model): a base id, "
                                  "ft:…/rl:… from the backend, or any model of the config's inference_url."),
        seeds: str = typer.Option(None, "--seeds", help="Seeds, e.g. 0,1,2 or 0-9 (default: [eval].seeds, else "
                                  "0,1,2,3,4)."),
        split: str = typer.Option(None, "--split", help="Dataset split (default: [eval].split, else train)."),
        url: str = typer.Option(None, "--url", help="A running task app's URL (default: [eval].task_app_url, else "
                                "the app runs in this process)."),
        env_file: list[str] = typer.Option(None, "--env-file", help=".env file to load (repeatable; first wins; "
                                           "default: the nearest .env)."),
        trace_db: str = typer.Option(None, "--trace-db", help="Traces v3 SQLite file (default: "
                                     "traces/v3/synth_ai.db; `none` stores nothing)."),
        metadata: list[str] = typer.Option(None, "--metadata", help="Only seeds whose task metadata has key=value "
                                           "(repeatable)."),
        metadata_sql: str = typer.Option(None, "--metadata-sql", help="Only seeds returned by this SQL over table "
                                         "`tasks` (seed, scenario_id, loop_id, thread_id, difficulty, …)."),
        concurrency: int = typer.Option(None, "--concurrency", min=1, help="Rollouts in flight (default: "
                                        "[eval].concurrency, else 1)."),
        rollout_timeout: float = typer.Option(None, "--rollout-timeout", min=0.1, help="Seconds one seed's rollout "
                                              "may take before it counts as timed out (default 300)."),
        backend: str = typer.Option(None, "--backend", help="Backend serving the model (default: BACKEND_BASE_URL, "
                                    "else the embedded backend, started when none runs)."),
        json_flag: bool = json_option(),
    ) -> None:
        """Evaluate a model on a task app: one rollout per seed, scored, traces stored.

        Exit 0 when every seed ran, 11 when some or all seeds errored or timed out.
        """
        from synth_ai.errors import ExitCode
        from synth_ai.eval.eval_settings import EvalOptions
        from synth_ai.eval.flow import Hooks, run_eval
        from synth_ai.eval.report import document, render

        out = output_of(ctx, json_flag)
        if app_id and app_id_option and app_id != app_id_option:
            raise typer.BadParameter(f"APP_ID is {app_id!r} but --app-id is {app_id_option!r}; give one of them.",
                                     param_hint="--app-id")
        app_id = app_id or app_id_option
        options = EvalOptions(
            app_id=app_id, config=config, model=model, seeds=seeds, split=split, url=url,
            env_files=list(env_file or []), trace_db=trace_db, metadata=list(metadata or []),
            metadata_sql=metadata_sql, concurrency=concurrency, backend=backend, rollout_timeout=rollout_timeout,
        )
        progress = _Progress(out)
        hooks = Hooks(say=out.info, started=progress.start, finished=progress.advance)
        run = None
        try:
            run = run_eval(options, hooks)
        except KeyboardInterrupt:
            progress.stop()
            stored = sum(r.stored for r in progress.results)
            out.warn(f"Interrupted: {len(progress.results)} seed(s) finished, {stored} stored; nothing half-written.")
            raise
        finally:
            progress.stop()
        doc = document(run.results, context=run.context, judge_names=run.judge_names)
        out.result(doc, lambda o: render(o, doc))
        if not run.complete:
            raise typer.Exit(code=int(ExitCode.ROLLOUTS_FAILED))


class _Progress:
    """A live bar on stderr in human mode (transient), with one line per finished seed above it."""

    def __init__(self, out) -> None:
        self.out = out
        self.bar = None
        self.task = None
        self.results: list = []

    def start(self, total: int) -> None:
        if self.out.json_mode:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=self.out.err, transient=True)
        self.task = self.bar.add_task("seeds", total=total)
        self.bar.start()

    def advance(self, result) -> None:
        from synth_ai.env.secrets import redact
        from synth_ai.eval.report import seed_line

        self.results.append(result)
        if self.bar is not None:
            self.bar.console.print(redact(seed_line(result)), markup=False, highlight=False)
            self.bar.advance(self.task)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
