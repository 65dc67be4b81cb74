"""What an iteration says about its step rewards and judge: the judge pass over the iteration's rollouts (with its
`rl.judge.failed` event) and the extra per-iteration numbers (`reward_step_mean`, `reward_judge_mean`,
`judge_failures`) that become the metrics `reward.step.mean`, `reward.judge.mean` and `judge.failures`."""

from __future__ import annotations

from typing import Any

from synth_ai.backend.trainers.rl.judge import Judge, JudgeReport
from synth_ai.backend.trainers.rl.rl_settings import RLSettings
from synth_ai.backend.trainers.rl.types import Rollout


def judge_rollouts(judge: Judge, rollouts: list[Rollout], reporter: Any, it: int) -> JudgeReport:
    report = judge.score(rollouts)
    for r in rollouts:
        r.response = None  # read; no longer needed
    if report.failed:
        kinds = ", ".join(f"{v} {k}" for k, v in sorted(report.failures.items()))
        reporter.event("rl.judge.failed",
                       f"iteration {it}: {report.failed} of {report.calls} judge calls gave no score ({kinds}); "
                       f"those scores were left out (not 0): {report.first_error}",
                       {"iteration": it, "failed": report.failed, "calls": report.calls, "by_kind": report.failures,
                        "first_error": report.first_error}, level="warning")
    return report


def reward_extras(settings: RLSettings, rollouts: list[Rollout], judged: JudgeReport | None) -> dict[str, Any]:
    extras: dict[str, Any] = {}
    ok = [r for r in rollouts if r.ok]
    if settings.step_rewards.active and ok:
        extras["reward_step_mean"] = sum(sum(r.step_rewards) for r in ok) / len(ok)
    if judged is not None:
        extras["reward_judge_mean"] = sum(judged.scores) / len(judged.scores) if judged.scores else None
        extras["judge_failures"] = judged.failed
        extras["judge_calls"] = judged.calls
    return extras
