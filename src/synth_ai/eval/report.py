"""The end of a run: one JSON document, or the reference's summary lines and a table (per seed: official,
outcome, judges, status; then means and each judge's Pearson r against the official score). An app that reports
its reward functions' scores (`metrics.details.reward_components`) also gets each function's score per seed and
its mean over the ok seeds (`summary.reward_components`); for the others both are left out."""

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
    doc = {
        "seeds": len(results), "ok": len(ok), "failed": len(results) - len(ok),
        "errors": sum(r.status == "error" for r in results), "timeouts": sum(r.status == "timeout" for r in results),
        "official_mean": mean(officials), "outcome_mean": mean(outcomes),
        "correct": sum(o >= CORRECT_AT for o in outcomes), "with_outcome": len(outcomes),
        "judges": judges, "stored": sum(r.stored for r in results),
    }
    components = reward_component_names(ok)
    if components:
        doc["reward_components"] = {
            name: {"mean": mean([r.reward_components.get(name) for r in ok]),
                   "scored": sum(name in r.reward_components for r in ok)} for name in components}
    return doc


def reward_component_names(results: list[SeedResult]) -> list[str]:
    """Every reward function any of `results` reported, in the order they first appear."""
    return list(dict.fromkeys(name for r in results for name in r.reward_components))


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
        parts += [f"reward.{name}={_fmt(score)}" for name, score in result.reward_components.items()]
        if result.task_id:
            parts.append(f"task_id={result.task_id}")
    else:
        parts.append(f"error={result.error}")
    parts.append(f"({result.elapsed_s:.2f}s)")
    return " ".join(parts)


def render(out: Any, doc: dict[str, Any]) -> None:
    s = doc["summary"]
    judge_names = list(s["judges"])
    component_names = list(s.get("reward_components") or {})
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
    for name, stats in (s.get("reward_components") or {}).items():
        out.info(f"  [reward {name}] mean: {_fmt(stats['mean'])} over {stats['scored']} seed(s)")
    rows = []
    for r in doc["results"]:
        ok = r["status"] == OK
        judges = [_fmt((r.get("judge_scores") or {}).get(n)) if ok else "-" for n in judge_names]
        components = [_fmt((r.get("reward_components") or {}).get(n)) if ok else "-" for n in component_names]
        rows.append([r["seed"], r.get("task_id") or "-", _fmt(r.get("official_score")) if ok else "-",
                     _fmt(r.get("outcome_score")) if ok else "-", *judges, *components,
                     r["status"] if ok else f"{r['status']}: {r.get('error', '')}"])
    out.table(["seed", "task", "official", "outcome", *judge_names,
               *(f"reward.{n}" for n in component_names), "status"], rows)
    if doc.get("trace_db"):
        out.info(f"Traces: {s['stored']} session(s) written to {doc['trace_db']}")
    else:
        out.info("Traces: not stored (--trace-db none)")
