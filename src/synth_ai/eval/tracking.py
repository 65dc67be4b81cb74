"""An eval's experiment trackers (the `[logging]` table beside `[eval]`): each finished seed's scores as points
(`eval.score`, `eval.outcome_score`, `eval.judge.<name>`, stepped by the seed's place in the run), the per-seed
table at the end, and the mean score, model and run id as the summary. A tracker that fails is one warning line;
the eval goes on."""

from __future__ import annotations

import os
from typing import Any

from synth_ai.eval.runner import OK, SeedResult
from synth_ai.tracking.public_config import public_config
from synth_ai.tracking.settings import resolve_tracking
from synth_ai.tracking.tables import table_event_data
from synth_ai.tracking.tracker import Tracker, warning_message

COLUMNS = ["seed", "status", "official_score", "outcome_score", "judge_scores", "elapsed_s", "error"]


class EvalTracking:
    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.done = 0

    def seed_finished(self, result: SeedResult) -> None:
        step = self.done
        self.done += 1
        points = [("eval.score", step, result.official_score, "eval"),
                  ("eval.outcome_score", step, result.outcome_score, "eval"),
                  *((f"eval.judge.{name}", step, score, "eval") for name, score in result.judge_scores.items())]
        self.tracker.points(points)

    def close(self, results: list[SeedResult], context: dict[str, Any], *, completed: bool) -> None:
        rows = [[r.seed, r.status, r.official_score, r.outcome_score, r.judge_scores or None, round(r.elapsed_s, 3),
                 r.error] for r in results]
        self.tracker.event(table_event_data("eval/seeds", 0, COLUMNS, rows))
        scores = [r.official_score for r in results if r.status == OK and r.official_score is not None]
        summary = {"eval_run_id": context.get("eval_run_id"), "model": context.get("model"),
                   "app_id": context.get("app_id"), "seeds": len(results),
                   "mean_score": sum(scores) / len(scores) if scores else None}
        self.tracker.close(status="succeeded" if completed else "failed", summary=summary)


def start_eval_tracking(config: dict[str, Any], *, run_id: str, model: str, say: Any) -> EvalTracking | None:
    from synth_ai.env.paths import data_dir

    tracking = resolve_tracking(config.get("logging"), run_id=run_id, data_dir=data_dir(),
                                environ=os.environ, run_name=f"eval {model} ({run_id})")
    if tracking is None:
        return None
    say(f"Reporting to {', '.join(tracking.report_to)} as run {tracking.run_name!r}.")
    tracker = Tracker(tracking, config=public_config(config),
                      warn=lambda name, reason, fix: say("warning: " + warning_message(name, reason, fix)))
    return EvalTracking(tracker)
