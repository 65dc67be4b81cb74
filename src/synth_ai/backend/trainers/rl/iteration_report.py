"""What an RL job reports about its iterations: the start, each iteration's record (rewards, losses, timings),
its metric points and `rl.train.step` event, rollouts that failed and images dropped from policy prompts."""

from __future__ import annotations

from typing import Any

from synth_ai.backend.inference.rollout_engine import RolloutEngine
from synth_ai.backend.trainers.rl.data_parallel import sum_values
from synth_ai.backend.trainers.rl.rl_settings import RLSettings
from synth_ai.backend.trainers.rl.types import Rollout


def report_started(reporter: Any, settings: RLSettings, trainer: Any, runner: Any, judge: Any, dp: Any,
                   devices: Any, start: int) -> None:
    reporter.event("rl.train.started",
                   f"GSPO on {settings.model_id} ({settings.mode}) for {settings.iterations} iterations: "
                   f"{settings.batch_size} seeds x {settings.group_size} rollouts, task app {settings.task_url} "
                   f"({trainer.where.device}, {trainer.dtype_name}).",
                   {"model": settings.model_id, "mode": settings.mode, "iterations": settings.iterations,
                    "start_iteration": start, "batch_size": settings.batch_size, "group_size": settings.group_size,
                    "learning_rate": settings.learning_rate, "epsilon_low": settings.epsilon_low,
                    "epsilon_high": settings.epsilon_high, "kl_coef": settings.kl_coef,
                    "weight_sync_interval": settings.weight_sync_interval, "concurrency": settings.concurrency,
                    "max_staleness": settings.max_staleness,
                    "importance_sampling_cap": settings.importance_sampling_cap if settings.asynchronous else None,
                    "task_url": settings.task_url, "policy_url": runner.policy_url, "device": trainer.where.device,
                    "dtype": trainer.dtype_name, "trainable_params": trainer.trainable_count,
                    "vision": trainer.vision, "seed": settings.seed, "world_size": dp.world,
                    "fsdp": settings.fsdp if dp.enabled else None,  # the sharding strategy (rl.sharded_policy)
                    # update memory: whether the layers are recomputed in backward (unset: CUDA decides)
                    "activation_checkpointing": trainer.activation_checkpointing,
                    "micro_batch_tokens": settings.micro_batch_tokens,
                    # what [topology] assigns; an engine in the trainer's process samples on the trainer's device,
                    # a separate inference process (the split) on its own, named in `rl.rollout_engine`
                    "devices": devices.describe(),
                    "rollout_device": devices.rollout[0] if devices.colocated else devices.trainer,
                    "step_rewards": settings.step_rewards.mode if settings.step_rewards.active else "off",
                    "judge": f"{settings.judge.provider}:{settings.judge.model}" if settings.judge else None,
                    "judge_rubrics": judge.rubric_source if judge else None})


def report_dropped_images(reporter: Any, engine: RolloutEngine, settings: RLSettings, it: int, dp: Any) -> None:
    dropped = int(sum_values(dp, [engine.images_dropped])[0])  # every rank's engine
    engine.images_dropped = 0
    if dropped:
        reporter.event("rl.images.dropped",
                       f"iteration {it}: {dropped} image(s) beyond max_images_per_step="
                       f"{settings.max_images_per_step} were dropped from policy prompts (oldest first).",
                       {"iteration": it, "images_dropped": dropped,
                        "max_images_per_step": settings.max_images_per_step}, level="warning")


def report_failures(reporter: Any, it: int, failed: list[Rollout], total: int) -> None:
    kinds: dict[str, int] = {}
    for r in failed:
        kinds[r.error_kind or "error"] = kinds.get(r.error_kind or "error", 0) + 1
    reporter.event("rl.rollouts.failed",
                   f"iteration {it}: {len(failed)} of {total} rollouts failed and were left out of training "
                   f"({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}): {failed[0].error}",
                   {"iteration": it, "failed": len(failed), "total": total, "by_kind": kinds,
                    "first_error": failed[0].error, "attempts": max(r.attempts for r in failed)}, level="warning")


def iteration_record(it: int, rollouts: list[Rollout], counts: dict[str, int], stats: Any, rollout_s: float,
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
            # groups whose members all scored alike: no advantage, no signal
            "frac_reward_zero_std": counts["groups_zero_variance"] / counts["groups"] if counts.get("groups") else 0.0,
            **({"loss": stats.loss, "clip_fraction": stats.clip_fraction, "kl": stats.kl, "ratio_mean":
                stats.ratio_mean, "optimizer_steps": stats.steps, "kl_ref": stats.ref_kl} if stats else {}),
            **(stats.off_policy if stats is not None and stats.off_policy else {})}


def write_metrics(reporter: Any, points: list[tuple[str, int, float | None, str]]) -> None:
    """One iteration's points together (in one transaction where the reporter can): a client that reads metrics
    `after_step` the highest step it has seen (synth-ai 0.2.17's streamer) would otherwise skip the points of a
    step written after its read."""
    points = [p for p in points if p[2] is not None]
    if callable(getattr(reporter, "metrics", None)):
        reporter.metrics(points)
        return
    for name, step, value, phase in points:
        reporter.metric(name, step, value, phase=phase)


def report_step(reporter: Any, settings: RLSettings, record: dict[str, Any], evaluated: float | None) -> None:
    it = record["iteration"]
    names = {"reward.mean": "reward_mean", "reward.std": "reward_std", "loss": "loss",
             "clip_fraction": "clip_fraction", "kl": "kl", "response_tokens.mean": "response_tokens_mean",
             "rollouts.errors": "errors", "rollouts.total": "rollouts", "rollouts_per_second": "rollouts_per_second",
             "kl_ref": "kl_ref",
             "reward.step.mean": "reward_step_mean", "reward.judge.mean": "reward_judge_mean",
             "judge.failures": "judge_failures", "frac_reward_zero_std": "frac_reward_zero_std",
             "mismatch_kl": "mismatch_kl", "trainer_idle_s": "trainer_idle_s",
             # asynchronous GSPO (docs/rl.md): the staleness bound, the backlog and the off-policy correction
             "staleness.mean": "staleness_mean", "staleness.max": "staleness_max", "backlog.groups": "backlog_groups",
             "stale_samples.dropped": "stale_dropped", "is_ratio.mean": "is_ratio_mean",
             "is_ratio.max": "is_ratio_max", "is_truncated_frac": "is_truncated_frac",
             "stale_adapter.dropped": "stale_adapter_dropped"}  # a LoRA policy served by vLLM as an adapter
    write_metrics(reporter, [(metric, it, record.get(key), "train") for metric, key in names.items()]
                   + [("eval.mean_return", it, evaluated, "eval")])
    if it % settings.log_interval == 0 or it + 1 == settings.iterations:
        reporter.event("rl.train.step", step_message(record, it, settings.iterations),
                       {**{k: (round(v, 6) if isinstance(v, float) else v) for k, v in record.items()},
                        # an iteration re-run after a worker restart repeats its step: the attempt tells them apart
                        "attempt": getattr(reporter, "attempt", 1)})


def step_message(record: dict[str, Any], it: int, iterations: int) -> str:
    """`iteration 3/8: reward 0.4062 (std 0.31), loss -2.481e-09, kl 1.2e-05, clip 0, 0 failed rollouts`.

    GSPO's loss is near zero by construction (group-normalised advantages average to zero, and the first
    minibatch's ratio is 1), so a fixed-point `loss -0.0000` said nothing: it is printed in scientific notation,
    beside the numbers that move from one iteration to the next (the reward's spread, the update's KL between
    the old and the new policy, the clipped fraction)."""
    parts = [f"iteration {it + 1}/{iterations}: reward {record.get('reward_mean', 0.0):.4f}"
             + (f" (std {record['reward_std']:.2g})" if isinstance(record.get("reward_std"), float) else "")]
    for key, label, spec in (("loss", "loss", ".3e"), ("kl", "kl", ".2g"), ("clip_fraction", "clip", ".2g")):
        if isinstance(record.get(key), (int, float)):
            parts.append(f"{label} {record[key]:{spec}}")
    parts.append(f"{record.get('errors', 0)} failed rollouts")
    return ", ".join(parts)
