"""`synth-ai demo`: the whole loop on one machine — baseline eval, sampled episodes filtered into SFT data, SFT,
RL from the SFT model, and an eval after each training step — through the same commands a user runs by hand.

Each training step is `train --no-poll` (the job id is known at once, so Ctrl-C can cancel exactly that job),
then `jobs events --follow` until it ends, then `jobs get` for the model and `jobs metrics` for the charts: the
CI-script pattern of the product docs.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any, Callable

from synth_ai.demo.commands import CommandRunner
from synth_ai.demo.plan import APP_ID, FAST, FULL, MODEL, RunFiles, write_configs
from synth_ai.demo.report import DemoResult, ModelScore, write_report
from synth_ai.demo.services import Services
from synth_ai.errors import InvalidInputError, JobFailedError


def run_demo(*, run_dir: Path | None, fast: bool, keep: bool, say: Callable[[str], None]) -> DemoResult:
    sizes = FAST if fast else FULL
    started = time.monotonic()
    root = (run_dir or Path("demo_runs") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    if root.exists() and any(root.iterdir()):
        raise InvalidInputError(f"The run folder {root} is not empty.",
                                hint="Pass --run-dir with a new folder, or remove the old run.")
    root.mkdir(parents=True, exist_ok=True)
    files = RunFiles(root)
    result = DemoResult(root, fast)
    env = _child_env()
    services = Services(say)
    runner = CommandRunner(root, env, say)
    job_ids: list[tuple[str, str]] = []
    try:
        backend = services.start_backend()
        services.warm_model(MODEL)
        task_url = services.serve_task_app(APP_ID, env=env, cwd=root, log_file=root / "task_app.log")
        configs = write_configs(files, sizes, task_url)
        api = backend["api_base"]
        say(f"Run folder: {root}")

        say("\n[1/4] Baseline: the base model on the held-out seeds")
        result.scores.append(_eval(runner, "baseline", configs["eval_held_out"], MODEL, files.traces, api))

        say("\n[2/4] Sample the base model on training seeds, keep the rewarded episodes as SFT data")
        _eval(runner, "sample", configs["eval_sample"], MODEL, files.sampled_traces, api, label="sampled")
        filtered = runner.run("filter", ["filter", "--config", str(configs["filter"])])
        examples = _first(filtered, "examples", default={})
        result.sft_examples = int(examples.get("written", 0)) if isinstance(examples, dict) else 0
        if result.sft_examples == 0:
            raise JobFailedError("The filter kept no episode to fine-tune on.",
                                 hint=f"See the sampled episodes: {files.sampled_traces}")

        say("\n[3/4] SFT on the filtered episodes, then score the fine-tuned model")
        sft_job = _train(runner, "sft", ["train", "--type", "sft", "--config", str(configs["sft"]),
                                         "--backend", api, "--no-poll"], job_ids)
        sft_model = _follow(runner, sft_job, "sft", api)
        result.scores.append(_eval(runner, "eval sft", configs["eval_held_out"], sft_model, files.traces, api,
                                   label="SFT", job_id=sft_job))
        _chart(runner, sft_job, "sft", "train.loss", root / "sft_loss.png", result, "SFT loss", "step", api)

        say("\n[4/4] RL (GSPO) from the SFT model, then score the RL model")
        rl_job = _train(runner, "rl", ["train", "--type", "rl", "--config", str(configs["rl"]), "--model", sft_model,
                                       "--task-url", task_url, "--backend", api, "--no-poll"], job_ids)
        rl_model = _follow(runner, rl_job, "rl", api)
        result.scores.append(_eval(runner, "eval rl", configs["eval_held_out"], rl_model, files.traces, api,
                                   label="SFT + RL", job_id=rl_job))
        _chart(runner, rl_job, "rl", "reward.mean", root / "rl_reward.png", result, "RL mean reward", "iteration",
               api)
    except KeyboardInterrupt:
        _cancel_running(runner, job_ids, api_of(services))
        raise
    finally:
        result.steps = [r.to_dict() for r in runner.records]
        result.seconds = time.monotonic() - started
        result.stopped = services.stop(keep=keep)
    write_report(result)
    return result


def api_of(services: Services) -> str | None:
    return services.backend.get("api_base")


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # The task app and every command share one environment key; a fresh one unless the user set theirs.
    env.setdefault("ENVIRONMENT_API_KEY", "sk_env_demo_" + secrets.token_hex(16))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _eval(runner: CommandRunner, step: str, config: Path, model: str, trace_db: Path, api: str, *,
          label: str = "base", job_id: str | None = None) -> ModelScore:
    doc = runner.run(step, ["eval", "--config", str(config), "--model", model, "--trace-db", str(trace_db),
                            "--backend", api])
    summary = doc.get("summary", {}) if isinstance(doc, dict) else {}
    score = summary.get("official_mean")
    return ModelScore(label, model, None if score is None else float(score), job_id, int(summary.get("failed", 0)))


def _train(runner: CommandRunner, step: str, argv: list[str], job_ids: list[tuple[str, str]]) -> str:
    from synth_ai.client.resources import job_id_of

    job_id = job_id_of(runner.run(step, argv), f"`synth-ai {' '.join(argv)}`")
    job_ids.append((job_id, step))
    return job_id


def _follow(runner: CommandRunner, job_id: str, kind: str, api: str) -> str:
    runner.run(f"follow {kind}", ["jobs", "events", job_id, "--kind", kind, "--follow", "--poll-interval", "1",
                                  "--backend", api])
    job = runner.run(f"get {kind}", ["jobs", "get", job_id, "--kind", kind, "--backend", api])
    model = _first(job, "fine_tuned_model")
    if not model:
        raise JobFailedError(f"Job {job_id} ended without a fine-tuned model.",
                             hint=f"See its events: synth-ai jobs events {job_id} --kind {kind}")
    return str(model)


def _chart(runner: CommandRunner, job_id: str, kind: str, metric: str, path: Path, result: DemoResult,
           title: str, x_label: str, api: str) -> None:
    from synth_ai.charts import line_chart

    doc = runner.run(f"metrics {kind}", ["jobs", "metrics", job_id, "--kind", kind, "--name", metric,
                                         "--backend", api])
    points = [(p["step"], p["value"]) for p in (_first(doc, "points", default=[]) or []) if p.get("name") == metric]
    written = line_chart(points, path, title=title, x_label=x_label, y_label=metric)
    if written is not None:
        result.charts[metric] = str(written)


def _cancel_running(runner: CommandRunner, job_ids: list[tuple[str, str]], api: str | None) -> None:
    """Ctrl-C: cancel the job the demo started last if it is still running, so a re-run starts cleanly."""
    if not job_ids or not api:
        return
    job_id, kind = job_ids[-1]
    try:
        runner.run(f"cancel {kind}", ["jobs", "cancel", job_id, "--kind", kind, "--backend", api], allow=(0, 6, 8))
    except Exception:  # noqa: BLE001 - best effort while stopping; the report still says what ran
        pass


def _first(doc: Any, *keys: str, default: Any = None) -> Any:
    if not isinstance(doc, dict):
        return default
    for key in keys:
        if doc.get(key) not in (None, ""):
            return doc[key]
    for nested in ("job", "result", "data"):
        if isinstance(doc.get(nested), dict):
            found = _first(doc[nested], *keys)
            if found is not None:
                return found
    return default
