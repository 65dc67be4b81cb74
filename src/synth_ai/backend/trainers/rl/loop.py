"""`run_rl`: the GSPO iteration loop (the RL kind's runner, what a job worker calls).

Per iteration: `batch_size` seeds x `group_size` rollouts against the task app through the rollout engine (the
policy served on 127.0.0.1), group-normalised advantages, GSPO updates on the recorded tokens, weight sync every
`weight_sync_interval` iterations, evaluation every `[evaluation].every_n_iters`, a checkpoint every
`checkpoint_interval`. The `/rollout` calls run in a child process (`rl.rollout_process`). While an iteration
updates, the next one's rollouts are already sent to the task app against a held engine (`rl.prefetch`: the task
app's own work overlaps the update; nothing is sampled before the weights are in place). Events: `rl.train.started`,
`rl.train.resumed`, `rl.train.step`, `rl.rollouts.failed`, `rl.taskapp.waiting`, `rl.taskapp.back`,
`rl.images.dropped`, `rl.eval.summary`, `rl.checkpoint.saved`, `rl.train.stopped`, `rl.train.completed`; the job's
terminal events belong to the worker. A task app that cannot be reached is waited for, within a window, and the
iteration goes on when it is back (`rl.taskapp_wait`).
Under torchrun every rank runs this loop on its share of the groups (`rl.data_parallel`); rank 0 alone reports,
checkpoints and saves the final model.
Asynchronous GSPO (`[training].max_staleness` > 0): the rollouts run in a pool beside the updates
(`rl.rollout_pool`), each iteration trains the batch the pool finished, drops samples staler than the bound
(`rl.staleness`), corrects the rest by truncated importance sampling (`rl.off_policy`) and publishes the weights to
the engine after every optimiser step; `rl.backlog.growing` warns when finished groups pile up.
The trainer and the engine come from `rl.run_parts` (the `Trainer` and `RolloutEngine` contracts).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.backend.inference.rollout_engine import RolloutEngine
from synth_ai.backend.trainers import distributed
from synth_ai.backend.trainers.job_context import JobReporter, ModelLocator, StopCheck
from synth_ai.backend.trainers.common import SilentReporter, TrainingCancelled, stop_reason
from synth_ai.backend.trainers.rl.data_parallel import from_main, place_rank, run_rollouts
from synth_ai.backend.trainers.rl.iteration_report import (
    iteration_record,
    report_dropped_images,
    report_failures,
    report_started,
    report_step,
    write_metrics,
)
from synth_ai.backend.trainers.rl.judge import Judge, require_judge_key, task_app_rubrics
from synth_ai.backend.trainers.rl.prefetch import Prefetch, prefetch_allowed
from synth_ai.backend.trainers.rl.reward_report import judge_rollouts as _judge
from synth_ai.backend.trainers.rl.reward_report import reward_extras
from synth_ai.backend.trainers.rl.rl_settings import RLSettings, resolve_rl_settings
from synth_ai.backend.trainers.rl.rollout_pool import RolloutPool, SerialRunner
from synth_ai.backend.trainers.rl.rollouts import RolloutsStopped, TaskAppUnavailable
from synth_ai.backend.trainers.rl.sample_report import report_samples
from synth_ai.backend.trainers.rl.staleness import BacklogWatch, drop_stale, drop_stale_adapters
from synth_ai.backend.trainers.rl.run_parts import RLParts, Trainer, default_parts
from synth_ai.backend.trainers.rl.step import build_samples
from synth_ai.backend.trainers.rl.taskapp_wait import TaskAppWait
from synth_ai.backend.trainers.rl.types import Rollout
from synth_ai.config.job_specs import RLJobSpec

MAX_FAILED_ITERATIONS = 3  # consecutive iterations where every rollout failed -> the job fails


def iteration_jobs(settings: RLSettings, iteration: int) -> list[tuple[int, int, str]]:
    """(seed, member, cid) of every rollout of `iteration`: new seeds each iteration, `group_size` per seed."""
    first = iteration * settings.batch_size
    return [(seed, g, f"{settings.job_id}-it{iteration}-s{seed}-g{g}")
            for seed in range(first, first + settings.batch_size) for g in range(settings.group_size)]


def run_rl(spec: RLJobSpec | Mapping[str, Any], *, workdir: Path, model_store: ModelLocator, reporter: JobReporter,
           should_stop: StopCheck, parts: RLParts | None = None) -> dict[str, Any]:
    """One RL job, from its typed spec (a flat dict, as benches build it, is read as one). `parts` makes the
    trainer and the rollout engine (`rl.run_parts`; a job's own by default, tests of the loop pass fakes)."""
    spec = RLJobSpec.of(spec)
    settings = resolve_rl_settings(spec)
    dp = distributed.current()
    if not dp.main:  # the other ranks of a torchrun job train silently; rank 0 reports for the job
        reporter = SilentReporter()
    devices = place_rank(spec, dp)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    run = _start(spec, settings, dp, devices, workdir, model_store, reporter, should_stop, parts or default_parts())
    run.run_iterations()
    return run.finish()


def _start(spec: RLJobSpec, settings: RLSettings, dp: Any, devices: Any, workdir: Path, model_store: ModelLocator,
           reporter: JobReporter, should_stop: StopCheck, parts: RLParts) -> GSPORun:
    """The policy (resumed from the newest checkpoint), the rollout engine and runner, the judge; then the
    `rl.train.started` event."""
    from synth_ai.backend.trainers.rl.rollout_process import make_runner
    from synth_ai.backend.trainers.rl.job_secrets import environment_key_candidates
    from synth_ai.backend.trainers.rl.rollouts import pick_environment_key

    trainer = parts.make_trainer(settings, model_store, workdir)
    if trainer.adjustment is not None and len(trainer.adjustment[1]) > 1:  # the job's LoRA settings set aside
        reporter.event("rl.config.adjusted", *trainer.adjustment)
    state = trainer.resume(reporter)
    wait = TaskAppWait(settings, dp, reporter, should_stop)
    wait.before_start(int(state.get("iteration", 0)))  # a resumed job whose app is not back yet waits for it
    # a job's: the built-in engine, or vLLM on GPUs (engine_choice)
    engine = parts.make_engine(settings, trainer, spec, reporter, dp.world)
    data_dir = getattr(model_store, "data_dir", None)
    api_key = pick_environment_key(settings.task_url, environment_key_candidates(spec, data_dir))
    runner = make_runner(settings, engine, api_key, should_stop)
    if settings.asynchronous:  # the pool's thread and the loop's share it
        runner = SerialRunner(runner)
    judge = Judge(require_judge_key(spec.config), task_rubrics=task_app_rubrics(settings.task_url, api_key)) \
        if settings.judge is not None and dp.main else None  # rank 0 judges every rollout
    run = GSPORun(settings, dp, reporter, trainer, engine, runner, judge, state, should_stop, wait)
    report_started(reporter, settings, trainer, runner, judge, dp, devices, run.start)
    return run


@dataclass
class _Collected:
    rollouts: list[Rollout]
    seconds: float  # with a prefetch, the wait left after the update (it is released)
    sent_early: bool  # prefetched: sent during the previous iteration's update
    overlapped_s: float


class GSPORun:
    """The iterations of one RL job, and what they carry from one to the next: the history, the last evaluation,
    the next iteration's prefetched rollouts, the last update's duration, the count of wholly failed
    iterations and the task app's outage, if any."""

    def __init__(self, settings: RLSettings, dp: Any, reporter: Any, trainer: Trainer, engine: RolloutEngine,
                 runner: Any, judge: Judge | None, state: dict[str, Any], should_stop: Callable[[], bool],
                 wait: TaskAppWait) -> None:
        self.settings, self.dp, self.reporter = settings, dp, reporter
        self.trainer, self.engine, self.runner, self.judge = trainer, engine, runner, judge
        self.should_stop = should_stop
        self.wait = wait
        self.history: list[dict[str, Any]] = state.get("history", [])
        self.start = int(state.get("iteration", 0))
        self.last_eval: float | None = state.get("last_eval")
        self.current = self.start
        self.prefetched: Prefetch | None = None  # the next iteration's rollouts, sent during this one's update
        self.update_s: float | None = None
        self.failed_in_a_row = 0
        self.pool: RolloutPool | None = None  # asynchronous GSPO's rollouts, running beside the updates
        self.backlog_watch = BacklogWatch(reporter, settings.batch_size, settings)

    def run_iterations(self) -> None:
        """Every iteration left, then the final evaluation; the runner, engine and any prefetch are closed
        whatever happens."""
        settings = self.settings
        if settings.asynchronous:
            self.pool = RolloutPool(self.runner, self.dp, lambda k: iteration_jobs(settings, k), first=self.start,
                                    end=settings.iterations, max_ahead=settings.max_staleness)
        try:
            for it in range(self.start, settings.iterations):
                self.current = it
                self._iteration(it)
                if self.pool is not None:
                    self.pool.done(it)  # also after an iteration with no update: the next batches may start
            if settings.eval_every:
                self.last_eval = _evaluate(self.runner, settings, self.reporter, settings.iterations, self.dp,
                                           self.wait)
                write_metrics(self.reporter, [("eval.mean_return", settings.iterations, self.last_eval, "eval")])
        except RolloutsStopped:
            self._stop(self.current)
        finally:
            if self.pool is not None:
                self.pool.close()
            if self.prefetched is not None:
                self.prefetched.cancel()
            if callable(getattr(self.runner, "close", None)):
                self.runner.close()
            self.engine.close()

    def _iteration(self, it: int) -> None:
        settings = self.settings
        if self.dp.any(self.should_stop()):
            self._stop(it)
        evaluated = None
        if settings.eval_every and it % settings.eval_every == 0:
            self.last_eval = evaluated = _evaluate(self.runner, settings, self.reporter, it, self.dp, self.wait)
        collected = self._collect_rollouts(it)
        if self.engine.failure is not None:  # the engine can sample no more (vLLM died): this attempt ends here
            raise self.engine.failure
        rollouts = collected.rollouts
        report_dropped_images(self.reporter, self.engine, settings, it, self.dp)
        failed = [r for r in rollouts if not r.ok]
        if failed:
            report_failures(self.reporter, it, failed, len(rollouts))
        if len(failed) == len(rollouts):
            self._skip_failed_iteration(it, failed, len(rollouts), evaluated)
            return
        self.failed_in_a_row = 0
        self._update(it, collected, evaluated)

    def _collect_rollouts(self, it: int) -> _Collected:
        """This iteration's rollouts: the prefetched ones, else sent now; those that could not reach the task app
        sent again once it is back."""
        started = time.perf_counter()
        prefetched = self.prefetched
        overlapped_s = prefetched.overlapped_s if prefetched is not None else 0.0
        jobs = iteration_jobs(self.settings, it)
        if self.pool is not None:
            rollouts = self.pool.take(it)
        elif prefetched is not None:
            rollouts, self.prefetched = prefetched.result(), None
        else:
            rollouts = run_rollouts(self.runner, jobs, self.dp, mode="rl")
        rollouts = self.wait.settle(self.runner, jobs, rollouts, it=it, mode="rl")
        return _Collected(rollouts, time.perf_counter() - started, prefetched is not None, overlapped_s)

    def _skip_failed_iteration(self, it: int, failed: list[Rollout], total: int, evaluated: float | None) -> None:
        """No update, but the step's counts still go on the metric series (the curve shows the hole); the job
        fails when they timed out or could not reach the app (only left here with the wait off: `rl.taskapp_wait`),
        or after MAX_FAILED_ITERATIONS such iterations in a row."""
        write_metrics(self.reporter, [("rollouts.errors", it, len(failed), "train"),
                                      ("rollouts.total", it, total, "train"),
                                      ("eval.mean_return", it, evaluated, "eval")])
        self.failed_in_a_row += 1
        if failed[0].error_kind in ("unreachable", "timeout") or self.failed_in_a_row >= MAX_FAILED_ITERATIONS:
            raise TaskAppUnavailable(f"every rollout of iteration {it} failed: {failed[0].error}")

    def _update(self, it: int, collected: _Collected, evaluated: float | None) -> None:
        """Judge, build samples, send the next iteration's rollouts early when allowed, train, sync the engine's
        weights, then record and report the iteration and checkpoint when due."""
        settings, dp, rollouts = self.settings, self.dp, collected.rollouts
        judged = None
        if settings.judge is not None:  # rank 0 judges; every rank goes on with the judged rollouts
            rollouts, judged = from_main(dp, (rollouts, _judge(self.judge, rollouts, self.reporter, it) if dp.main
                                              else None))
        samples, counts = build_samples(rollouts, settings)
        samples, extra = drop_stale_adapters(samples, self.engine, self.reporter, it)
        if self.pool is not None:
            samples, staleness = drop_stale(samples, self.trainer.version, settings.max_staleness)
            backlog = self.pool.backlog_batches() * settings.batch_size
            extra.update(staleness.record(), backlog_groups=backlog)
            self.backlog_watch.check(it, backlog)
        elif samples and prefetch_allowed(settings, self.engine, next_iteration=it + 1, last_update_s=self.update_s,
                                          rollouts_s=None if collected.sent_early else collected.seconds) \
                and not self.should_stop():
            self.prefetched = Prefetch(self.runner, self.engine, iteration_jobs(settings, it + 1), dp, mode="rl")
        t_train = time.perf_counter()
        # asynchronous: the engine gets the weights after every optimiser step, rows in flight decoding on
        stats = self.trainer.train(samples, after_step=self.engine.publish if self.pool is not None else None) \
            if samples else None
        train_s = time.perf_counter() - t_train
        if stats is not None:
            self.update_s = train_s
        if self.pool is not None:
            self.pool.done(it)
        elif (it + 1) % settings.weight_sync_interval == 0:
            self.engine.sync_weights()
        if self.prefetched is not None:
            self.prefetched.release()  # the next rollouts sample from the weights just synced
        record = iteration_record(it, rollouts, counts, stats, collected.seconds, train_s)
        record["rollouts_overlapped_s"] = round(collected.overlapped_s, 3)
        record["trainer_idle_s"] = round(collected.seconds, 3)  # waiting for rollouts (their wait, not their run)
        record.update(extra)
        record.update(reward_extras(settings, rollouts, judged))
        self.history.append(record)
        report_step(self.reporter, settings, record, evaluated)
        report_samples(self.reporter, it, rollouts, self.trainer.tokenizer)  # for the trackers, when any
        done = it + 1
        if done % settings.checkpoint_interval == 0 and done != settings.iterations:
            path = self.trainer.checkpoint(done, self.history, self.last_eval)
            self.reporter.event("rl.checkpoint.saved", f"Checkpoint saved after iteration {done}.",
                                {"iteration": done, "path": str(path)})

    def _stop(self, it: int) -> None:
        path = self.trainer.checkpoint(it, self.history, self.last_eval) if it > self.start else None
        why = stop_reason(self.should_stop)
        self.reporter.event("rl.train.stopped",
                            f"Stopped before iteration {it} because {why}; rollouts in flight were cancelled.",
                            {"iteration": it, "checkpoint": str(path) if path else None, "reason": why},
                            level="warning")
        raise TrainingCancelled(it, path)

    def finish(self) -> dict[str, Any]:
        """Rank 0 saves and registers the final model and reports the run; the other ranks hold the same
        weights (or, sharded, help gather them)."""
        settings = self.settings
        fine_tuned = self.trainer.save_final(self.history, self.last_eval)  # every rank: a sharded one gathers
        if not self.dp.main:
            return {"fine_tuned_model": fine_tuned, "rank": self.dp.rank}
        rewards = [h["reward_mean"] for h in self.history if h.get("reward_mean") is not None]
        summary = {"iterations": settings.iterations, "reward_first": rewards[0] if rewards else None,
                   "reward_last": rewards[-1] if rewards else None, "eval_mean_return": self.last_eval}
        self.reporter.event("rl.train.completed", f"GSPO finished: {fine_tuned}",
                            {"fine_tuned_model": fine_tuned, **summary, "reward_curve": [round(r, 4) for r in rewards]})
        return {"fine_tuned_model": fine_tuned, "mode": settings.mode, **summary}


def _evaluate(runner: Any, settings: RLSettings, reporter: Any, it: int, dp: Any, wait: TaskAppWait) -> float | None:
    jobs = [(seed, 0, f"{settings.job_id}-eval{it}-s{seed}") for seed in settings.eval_seeds]
    results = run_rollouts(runner, jobs, dp, mode="eval", extra_policy=settings.eval_policy_config)
    results = wait.settle(runner, jobs, results, it=it, mode="eval", extra_policy=settings.eval_policy_config)
    ok = [r.reward for r in results if r.ok]
    mean = sum(ok) / len(ok) if ok else None
    reporter.event("rl.eval.summary",
                   f"iteration {it}: eval mean return {mean:.4f} on {len(ok)} seeds" if mean is not None
                   else f"iteration {it}: every eval rollout failed",
                   {"iteration": it, "mean_return": mean, "seeds": len(jobs), "errors": len(jobs) - len(ok),
                    "returns": ok}, level="info" if mean is not None else "warning")
    return mean


__all__ = ["run_rl"]
