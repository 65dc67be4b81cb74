"""The end of a run: one JSON document, or the reference's summary lines and a table (per seed: official,
outcome, judges, status; then means and each judge's Pearson r against the official score)."""

from __future__ import annotations

from typing import Any

from synth_ai.eval.runner import OK, SeedResult
from synth_ai.eval.scoring import CORRECT_AT, mean, pearson


def summary(results: list[SeedResult], judge_names: list[str]) -> dict[str, Any]:
    ok = [r for r in results if r.status == OK]
    outcomes = [r.outcome_score for r in ok if r.outcome_score is not None]
    officials = [r.official_score for r in ok]
    judges = {}
    for name in judge_names:
        scores = [r.judge_scores.get(name) for r in ok]
        judges[name] = {"mean": mean(scores), "pearson_r": pearson(scores, officials),
                        "scored": sum(s is not None for s in scores)}
    return {
        "seeds": len(results), "ok": len(ok), "failed": len(results) - len(ok),
        "errors": sum(r.status == "error" for r in results), "timeouts": sum(r.status == "timeout" for r in results),
        "official_mean": mean(officials), "outcome_mean": mean(outcomes),
        "correct": sum(o >= CORRECT_AT for o in outcomes), "with_outcome": len(outcomes),
        "judges": judges, "stored": sum(r.stored for r in results),
    }


def document(results: list[SeedResult], *, context: dict[str, Any], judge_names: list[str]) -> dict[str, Any]:
    return {**context, "summary": summary(results, judge_names), "results": [r.to_dict() for r in results]}


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def seed_line(result: SeedResult) -> str:
    parts = [f"seed={result.seed}", f"status={result.status}"]
    if result.status == OK:
        parts += [f"official={_fmt(result.official_score)}"]
        if result.outcome_score is not None:
            parts.append(f"outcome={_fmt(result.outcome_score)}")
        parts += [f"{name}={_fmt(score)}" for name, score in result.judge_scores.items()]
        if result.task_id:
            parts.append(f"task_id={result.task_id}")
    else:
        parts.append(f"error={result.error}")
    parts.append(f"({result.elapsed_s:.2f}s)")
    return " ".join(parts)


def render(out: Any, doc: dict[str, Any]) -> None:
    s = doc["summary"]
    judge_names = list(s["judges"])
    out.info(f"Eval complete: {s['ok']} ok, {s['failed']} failed; model={doc['model']}, split={doc['split']}")
    if s["with_outcome"]:
        share = s["correct"] / s["with_outcome"]
        out.info(f"Outcome summary: correct={s['correct']}/{s['with_outcome']} ({share:.2%}), "
                 f"mean_outcome={s['outcome_mean']:.3f}")
    out.info(f"  Official mean: {_fmt(s['official_mean'])}")
    for name, stats in s["judges"].items():
        out.info(f"  [{name}] mean: {_fmt(stats['mean'])}")
        r = stats["pearson_r"]
        out.info(f"    Pearson r: {r:.3f}" if r is not None else "    Pearson r: n/a (needs 2 varying pairs)")
    rows = []
    for r in doc["results"]:
        judges = [_fmt((r.get("judge_scores") or {}).get(n)) if r["status"] == OK else "-" for n in judge_names]
        rows.append([r["seed"], r.get("task_id") or "-",
                     _fmt(r.get("official_score")) if r["status"] == OK else "-",
                     _fmt(r.get("outcome_score")) if r["status"] == OK else "-", *judges,
                     r["status"] if r["status"] == OK else f"{r['status']}: {r.get('error', '')}"])
    out.table(["seed", "task", "official", "outcome", *judge_names, "status"], rows)
    if doc.get("trace_db"):
        out.info(f"Traces: {s['stored']} session(s) written to {doc['trace_db']}")
    else:
        out.info("Traces: not stored (--trace-db none)")
