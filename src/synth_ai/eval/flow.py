"""`synth-ai eval` from flags to results: settings, judges, the model endpoint, the task app, seed selection,
the run, and the trace store (opened once, closed at the end even on Ctrl-C)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from synth_ai.errors import InvalidInputError
from synth_ai.eval.eval_settings import EvalOptions, EvalSettings, resolve_settings
from synth_ai.eval.runner import OK, RunSpec, SeedResult, run_all
from synth_ai.eval.tracking import start_eval_tracking


@dataclass
class Hooks:
    say: Callable[[str], None] = lambda text: None
    started: Callable[[int], None] = lambda total: None  # the number of seeds, once chosen
    finished: Callable[[SeedResult], None] = lambda result: None


@dataclass
class EvalRun:
    settings: EvalSettings
    seeds: list[int] = field(default_factory=list)
    results: list[SeedResult] = field(default_factory=list)  # what finished (all of them after a full run)
    context: dict[str, Any] = field(default_factory=dict)
    judge_names: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return len(self.results) == len(self.seeds) and all(r.status == OK for r in self.results)


def run_eval(options: EvalOptions, hooks: Hooks) -> EvalRun:
    from synth_ai.eval.judges import load_judges

    settings = resolve_settings(options)
    for notice in settings.notices:
        hooks.say(notice)
    judges = load_judges(settings.config, settings.config_path.parent if settings.config_path else None)
    run = EvalRun(settings, judge_names=[j.name for j in judges])
    # The model endpoint is resolved once the app and the seeds are known (it may start the embedded backend).
    spec = RunSpec(model=settings.model, split=settings.split, cfg=settings.config, target=None,
                   concurrency=settings.concurrency, rollout_timeout=settings.rollout_timeout, judges=judges,
                   app_id=settings.app_id, say=hooks.say)
    run.context = {
        "model": settings.model, "app_id": settings.app_id, "task_app": settings.url or "in-process",
        "split": settings.split, "concurrency": settings.concurrency,
        "trace_db": str(settings.trace_db) if settings.trace_db else None,
        "config": str(settings.config_path) if settings.config_path else None, "eval_run_id": spec.eval_run_id,
    }
    tracking = start_eval_tracking(settings.config, run_id=spec.eval_run_id, model=settings.model, say=hooks.say)
    if tracking is not None:
        hooks = replace(hooks, finished=_also(hooks.finished, tracking.seed_finished))
    try:
        asyncio.run(_run(run, spec, hooks))
    finally:
        if tracking is not None:
            tracking.close(run.results, run.context, completed=run.complete)
    return run


def _also(first: Callable[[SeedResult], None], then: Callable[[SeedResult], None]) -> Callable[[SeedResult], None]:
    def both(result: SeedResult) -> None:
        first(result)
        then(result)

    return both


def _open_store(settings: EvalSettings) -> Any:
    if settings.trace_db is None:
        return None
    from synth_ai.tracing.store import TraceStore

    try:
        return TraceStore(settings.trace_db)
    except (OSError, sqlite3.Error) as exc:
        raise InvalidInputError(f"Cannot open the trace database {settings.trace_db}: {exc}",
                                hint="Pass another --trace-db path, or --trace-db none to store nothing.") from None


async def _run(run: EvalRun, spec: RunSpec, hooks: Hooks) -> None:
    from synth_ai.eval.apps import open_task_app
    from synth_ai.eval.policy import resolve_inference
    from synth_ai.eval.seeds import select_seeds
    from synth_ai.taskapp.reachability import TaskAppOutage, probe_health

    settings = run.settings
    async with open_task_app(app_id=settings.app_id, url=settings.url, timeout=settings.rollout_timeout,
                             concurrency=settings.concurrency, env_files=settings.env_files) as app:
        if app.app_id:  # in-process: the app's own id (an alias was given, or none)
            spec.app_id = run.context["app_id"] = app.app_id
        spec.outage = TaskAppOutage(settings.url or app.where, settings.task_app_wait,
                                    probe=lambda: probe_health(app.client))
        run.seeds = await select_seeds(app.client, settings.seeds, settings.metadata, settings.metadata_sql)
        run.context["seeds"] = run.seeds
        spec.target = await asyncio.to_thread(resolve_inference, settings.config, settings.backend, hooks.say)
        run.context.update(inference_url=spec.target.url or "from the config", inference=spec.target.source)
        hooks.say(f"Task app: {app.where}; model {settings.model} via {spec.target.source}"
                  + (f" ({spec.target.url})" if spec.target.url else ""))
        hooks.started(len(run.seeds))

        def finished(result: SeedResult) -> None:
            run.results.append(result)
            hooks.finished(result)

        store = _open_store(settings)  # only now: a run stopped earlier leaves no file behind
        try:
            await run_all(app.client, spec, run.seeds, store, finished)
        finally:
            if store is not None:
                store.close()
    run.results.sort(key=lambda r: run.seeds.index(r.seed))
