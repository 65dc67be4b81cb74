"""`run_rl`: the GSPO iteration loop (what a job worker calls for `kind = "rl"`).

Per iteration: `batch_size` seeds x `group_size` rollouts against the task app through the rollout engine (the
policy served on 127.0.0.1), group-normalised advantages, GSPO updates on the recorded tokens, weight sync every
`weight_sync_interval` iterations, evaluation every `[evaluation].every_n_iters`, a checkpoint every
`checkpoint_interval`. The `/rollout` calls run in a child process (`rl.rollout_process`). While an iteration
updates, the next one's rollouts are already sent to the task app against a held engine (`rl.prefetch`: the task
app's own work overlaps the update; nothing is sampled before the weights are in place). Events: `rl.train.started`,
`rl.train.resumed`, `rl.train.step`, `rl.rollouts.failed`, `rl.images.dropped`, `rl.eval.summary`,
`rl.checkpoint.saved`, `rl.train.stopped`, `rl.train.completed`; the job's terminal events belong to the worker.
Under torchrun every rank runs this loop on its share of the groups (`rl.data_parallel`); rank 0 alone reports,
checkpoints and saves the final model.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from synth_ai.backend.trainers import distributed
from synth_ai.backend.trainers.rl.data_parallel import from_main, place_rank, run_rollouts, sum_values
from synth_ai.backend.trainers.rl.judge import Judge, require_judge_key, task_app_rubrics
from synth_ai.backend.trainers.rl.prefetch import Prefetch, prefetch_allowed
from synth_ai.backend.trainers.rl.reward_report import judge_rollouts as _judge
from synth_ai.backend.trainers.rl.reward_report import reward_extras, spec_config
from synth_ai.backend.trainers.rl.rollouts import RolloutsStopped, TaskAppUnavailable
from synth_ai.backend.trainers.rl.rl_settings import RLSettings, resolve_rl_settings
from synth_ai.backend.trainers.rl.step import GSPOTrainer, build_samples
from synth_ai.backend.trainers.rl.types import Rollout
from synth_ai.backend.trainers.sft.sft_settings import TrainingCancelled
from synth_ai.backend.trainers.common import SilentReporter

MAX_FAILED_ITERATIONS = 3  # consecutive iterations where every rollout failed -> the job fails


def iteration_jobs(settings: RLSettings, iteration: int) -> list[tuple[int, int, str]]:
    """(seed, member, cid) of every rollout of `iteration`: new seeds each iteration, `group_size` per seed."""
    first = iteration * settings.batch_size
    return [(seed, g, f"{settings.job_id}-it{iteration}-s{seed}-g{g}")
            for seed in range(first, first + settings.batch_size) for g in range(settings.group_size)]


def environment_key_candidates(spec: dict[str, Any], data_dir: Path | None) -> list[str]:
    """Keys to send the task app in X-API-Key: one given with the job first, then the backend's known keys
    (`synth_ai.env.backend_keys.environment_keys`)."""
    from synth_ai.env.backend_keys import environment_keys

    given = [spec.get("environment_api_key"), (spec.get("data") or {}).get("environment_api_key")]
    found = [k for k in given if isinstance(k, str) and k.strip()]
    for key in environment_keys(data_dir):
        if key not in found:
            found.append(key)
    return found


def run_rl(spec: dict[str, Any], *, workdir: Path, model_store: Any, reporter: Any,
           should_stop: Callable[[], bool]) -> dict[str, Any]:
    settings = resolve_rl_settings(spec)
    dp = distributed.current()
    if not dp.main:  # the other ranks of a torchrun job train silently; rank 0 reports for the job
        reporter = SilentReporter()
    devices = place_rank(spec, dp)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from synth_ai.backend.trainers.rl.engine_choice import build_rollout_engine
    from synth_ai.backend.trainers.rl.rollout_process import make_runner
    from synth_ai.backend.trainers.rl.rollouts import pick_environment_key

    trainer = GSPOTrainer(settings, model_store, workdir)
    state = trainer.resume(reporter)
    history: list[dict[str, Any]] = state.get("history", [])
    start = int(state.get("iteration", 0))
    # the built-in engine, or vLLM on GPUs (engine_choice)
    engine = build_rollout_engine(settings, trainer, spec, reporter, ranks=dp.world)
    data_dir = getattr(model_store, "data_dir", None)
    api_key = pick_environment_key(settings.task_url, environment_key_candidates(spec, data_dir))
    runner = make_runner(settings, engine, api_key, should_stop)
    judge = Judge(require_judge_key(spec_config(spec)), task_rubrics=task_app_rubrics(settings.task_url, api_key)) \
        if settings.judge is not None and dp.main else None  # rank 0 judges every rollout
    reporter.event("rl.train.started",
                   f"GSPO on {settings.model_id} ({settings.mode}) for {settings.iterations} iterations: "
                   f"{settings.batch_size} seeds x {settings.group_size} rollouts, task app {settings.task_url} "
                   f"({trainer.where.device}, {trainer.dtype_name}).",
                   {"model": settings.model_id, "mode": settings.mode, "iterations": settings.iterations,
                    "start_iteration": start, "batch_size": settings.batch_size, "group_size": settings.group_size,
                    "learning_rate": settings.learning_rate, "epsilon_low": settings.epsilon_low,
                    "epsilon_high": settings.epsilon_high, "kl_coef": settings.kl_coef,
                    "weight_sync_interval": settings.weight_sync_interval, "concurrency": settings.concurrency,
                    "task_url": settings.task_url, "policy_url": runner.policy_url, "device": trainer.where.device,
                    "dtype": trainer.dtype_name, "trainable_params": trainer.trainable_count,
                    "vision": trainer.vision, "seed": settings.seed, "world_size": dp.world,
                    # what [topology] assigns; until an engine runs on its own GPUs (docs/scale.md) it samples
                    # on the trainer's device
                    "devices": devices.describe(),
                    "rollout_device": devices.rollout[0] if devices.colocated else devices.trainer,
                    "step_rewards": settings.step_rewards.mode if settings.step_rewards.active else "off",
                    "judge": f"{settings.judge.provider}:{settings.judge.model}" if settings.judge else None,
                    "judge_rubrics": judge.rubric_source if judge else None})

    failed_in_a_row = 0
    last_eval: float | None = state.get("last_eval")
    current = start
    prefetched: Prefetch | None = None  # the next iteration's rollouts, sent during this iteration's update
    update_s: float | None = None
    try:
        for it in range(start, settings.iterations):
            current = it
            if dp.any(should_stop()):
                _stop(trainer, reporter, it, start, history, last_eval)
            evaluated = None
            if settings.eval_every and it % settings.eval_every == 0:
                last_eval = evaluated = _evaluate(runner, settings, reporter, it, dp)
            started = time.perf_counter()  # with a prefetch, the wait left after the update (it is released)
            sent_early = prefetched is not None
            overlapped_s = prefetched.overlapped_s if prefetched is not None else 0.0
            if prefetched is not None:
                rollouts, prefetched = prefetched.result(), None
            else:
                rollouts = run_rollouts(runner, iteration_jobs(settings, it), dp, mode="rl")
            rollout_s = time.perf_counter() - started
            _report_dropped_images(reporter, engine, settings, it, dp)
            failed = [r for r in rollouts if not r.ok]
            if failed:
                _report_failures(reporter, it, failed, len(rollouts))
            if len(failed) == len(rollouts):
                # no update, but the step's counts still go on the metric series (the curve shows the hole)
                _write_metrics(reporter, [("rollouts.errors", it, len(failed), "train"),
                                          ("rollouts.total", it, len(rollouts), "train"),
                                          ("eval.mean_return", it, evaluated, "eval")])
                failed_in_a_row += 1
                if failed[0].error_kind in ("unreachable", "timeout") or failed_in_a_row >= MAX_FAILED_ITERATIONS:
                    raise TaskAppUnavailable(f"every rollout of iteration {it} failed: {failed[0].error}")
                continue
            failed_in_a_row = 0
            judged = None
            if settings.judge is not None:  # rank 0 judges; every rank goes on with the judged rollouts
                rollouts, judged = from_main(dp, (rollouts, _judge(judge, rollouts, reporter, it) if dp.main
                                                  else None))
            samples, counts = build_samples(rollouts, settings)
            if samples and prefetch_allowed(settings, engine, next_iteration=it + 1, last_update_s=update_s,
                                            rollouts_s=None if sent_early else rollout_s) and not should_stop():
                prefetched = Prefetch(runner, engine, iteration_jobs(settings, it + 1), dp, mode="rl")
            t_train = time.perf_counter()
            stats = trainer.train(samples) if samples else None
            train_s = time.perf_counter() - t_train
            if stats is not None:
                update_s = train_s
            if (it + 1) % settings.weight_sync_interval == 0:
                engine.sync_weights()
            if prefetched is not None:
                prefetched.release()  # the next rollouts sample from the weights just synced
            record = _iteration_record(it, rollouts, counts, stats, rollout_s, train_s)
            record["rollouts_overlapped_s"] = round(overlapped_s, 3)
            record.update(reward_extras(settings, rollouts, judged))
            history.append(record)
            _report_step(reporter, settings, record, evaluated)
            done = it + 1
            if done % settings.checkpoint_interval == 0 and done != settings.iterations:
                path = trainer.checkpoint(done, history, last_eval)
                reporter.event("rl.checkpoint.saved", f"Checkpoint saved after iteration {done}.",
                               {"iteration": done, "path": str(path)})
        if settings.eval_every:
            last_eval = _evaluate(runner, settings, reporter, settings.iterations, dp)
            _write_metrics(reporter, [("eval.mean_return", settings.iterations, last_eval, "eval")])
    except RolloutsStopped:
        _stop(trainer, reporter, current, start, history, last_eval)
    finally:
        if prefetched is not None:
            prefetched.cancel()
        if callable(getattr(runner, "close", None)):
            runner.close()
        engine.stop()

    if not dp.main:  # rank 0 saves and registers the model; the other ranks hold the same weights
        return {"fine_tuned_model": f"rl:{trainer.root_base}:{settings.job_id}", "rank": dp.rank}
    fine_tuned = trainer.save_final(history, last_eval)
    rewards = [h["reward_mean"] for h in history if h.get("reward_mean") is not None]
    summary = {"iterations": settings.iterations, "reward_first": rewards[0] if rewards else None,
               "reward_last": rewards[-1] if rewards else None, "eval_mean_return": last_eval}
    reporter.event("rl.train.completed", f"GSPO finished: {fine_tuned}", {"fine_tuned_model": fine_tuned, **summary,
                   "reward_curve": [round(r, 4) for r in rewards]})
    return {"fine_tuned_model": fine_tuned, "mode": settings.mode, **summary}


def _stop(trainer: Any, reporter: Any, it: int, start: int, history: list[dict[str, Any]],
          last_eval: float | None) -> None:
    path = trainer.checkpoint(it, history, last_eval) if it > start else None
    reporter.event("rl.train.stopped", f"Stopped before iteration {it} as asked; rollouts in flight were cancelled.",
                   {"iteration": it, "checkpoint": str(path) if path else None}, level="warning")
    raise TrainingCancelled(it, path)


def _evaluate(runner: Any, settings: RLSettings, reporter: Any, it: int, dp: Any) -> float | None:
    jobs = [(seed, 0, f"{settings.job_id}-eval{it}-s{seed}") for seed in settings.eval_seeds]
    results = run_rollouts(runner, jobs, dp, mode="eval", extra_policy=settings.eval_policy_config)
    ok = [r.reward for r in results if r.ok]
    mean = sum(ok) / len(ok) if ok else None
    reporter.event("rl.eval.summary",
                   f"iteration {it}: eval mean return {mean:.4f} on {len(ok)} seeds" if mean is not None
                   else f"iteration {it}: every eval rollout failed",
                   {"iteration": it, "mean_return": mean, "seeds": len(jobs), "errors": len(jobs) - len(ok),
                    "returns": ok}, level="info" if mean is not None else "warning")
    return mean


def _report_dropped_images(reporter: Any, engine: Any, settings: RLSettings, it: int, dp: Any) -> None:
    dropped = int(sum_values(dp, [getattr(engine, "images_dropped", 0)])[0])  # every rank's engine
    engine.images_dropped = 0
    if dropped:
        reporter.event("rl.images.dropped",
                       f"iteration {it}: {dropped} image(s) beyond max_images_per_step="
                       f"{settings.max_images_per_step} were dropped from policy prompts (oldest first).",
                       {"iteration": it, "images_dropped": dropped,
                        "max_images_per_step": settings.max_images_per_step}, level="warning")


def _report_failures(reporter: Any, it: int, failed: list[Rollout], total: int) -> None:
    kinds: dict[str, int] = {}
    for r in failed:
        kinds[r.error_kind or "error"] = kinds.get(r.error_kind or "error", 0) + 1
    reporter.event("rl.rollouts.failed",
                   f"iteration {it}: {len(failed)} of {total} rollouts failed and were left out of training "
                   f"({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}): {failed[0].error}",
                   {"iteration": it, "failed": len(failed), "total": total, "by_kind": kinds,
                    "first_error": failed[0].error, "attempts": max(r.attempts for r in failed)}, level="warning")


def _iteration_record(it: int, rollouts: list[Rollout], counts: dict[str, int], stats: Any, rollout_s: float,
                      train_s: float) -> dict[str, Any]:
    import statistics

    rewards = [r.reward for r in rollouts if r.ok and r.reward is not None]
    lengths = [len(s.completion_ids) for r in rollouts if r.ok for c in r.calls for s in c.samples]
    return {"iteration": it, "reward_mean": statistics.fmean(rewards) if rewards else None,
            "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            "rollouts": len(rollouts), "errors": len(rollouts) - len(rewards),
            "response_tokens_mean": statistics.fmean(lengths) if lengths else 0.0,
            "rollouts_per_second": len(rollouts) / max(rollout_s, 1e-9), "rollout_s": round(rollout_s, 3),
            "train_s": round(train_s, 3), **counts,
            **({"loss": stats.loss, "clip_fraction": stats.clip_fraction, "kl": stats.kl, "ratio_mean":
                stats.ratio_mean, "optimizer_steps": stats.steps, "kl_ref": stats.ref_kl} if stats else {})}


def _write_metrics(reporter: Any, points: list[tuple[str, int, float | None, str]]) -> None:
    """One iteration's points together (in one transaction where the reporter can): a client that reads metrics
    `after_step` the highest step it has seen (synth-ai 0.2.17's streamer) would otherwise skip the points of a
    step written after its read."""
    points = [p for p in points if p[2] is not None]
    if callable(getattr(reporter, "metrics", None)):
        reporter.metrics(points)
        return
    for name, step, value, phase in points:
        reporter.metric(name, step, value, phase=phase)


def _report_step(reporter: Any, settings: RLSettings, record: dict[str, Any], evaluated: float | None) -> None:
    it = record["iteration"]
    names = {"reward.mean": "reward_mean", "reward.std": "reward_std", "loss": "loss",
             "clip_fraction": "clip_fraction", "kl": "kl", "response_tokens.mean": "response_tokens_mean",
             "rollouts.errors": "errors", "rollouts.total": "rollouts", "rollouts_per_second": "rollouts_per_second",
             "kl_ref": "kl_ref",
             "reward.step.mean": "reward_step_mean", "reward.judge.mean": "reward_judge_mean",
             "judge.failures": "judge_failures"}
    _write_metrics(reporter, [(metric, it, record.get(key), "train") for metric, key in names.items()]
                   + [("eval.mean_return", it, evaluated, "eval")])
    if it % settings.log_interval == 0 or it + 1 == settings.iterations:
        reward = record.get("reward_mean")
        reporter.event("rl.train.step",
                       f"iteration {it + 1}/{settings.iterations}: reward {reward:.4f}"
                       + (f", loss {record['loss']:.4f}" if record.get("loss") is not None else "")
                       + f", {record['errors']} failed rollouts",
                       {k: (round(v, 6) if isinstance(v, float) else v) for k, v in record.items()})


__all__ = ["run_rl"]
