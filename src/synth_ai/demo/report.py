"""The demo's ending: the table of models and their held-out scores, and `report.md` in the run folder."""

from __future__ import annotations

from typing import Any

from synth_ai.demo.flow import DemoResult


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _delta(value: float | None, baseline: float | None) -> str:
    if value is None or baseline is None:
        return "n/a"
    return f"{value - baseline:+.3f}"


def table_rows(result: DemoResult) -> list[list[Any]]:
    return [[s.label, s.model, _fmt(s.score), _delta(s.score, result.baseline), s.job_id or "-"]
            for s in result.scores]


COLUMNS = ["model", "id", "held-out mean reward", "change from baseline", "job"]


def write_report(result: DemoResult) -> None:
    lines = [
        "# synth-ai demo run",
        "",
        f"Mode: {'fast' if result.fast else 'full'}; took {result.seconds:.0f} s; "
        f"{result.sft_examples} SFT examples kept by the filter.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *["| " + " | ".join(str(c) for c in row) + " |" for row in table_rows(result)],
        "",
        "## Steps (each can be re-run by hand from this folder)",
        "",
        *[f"- {s['step']}: `{s['command']}` (exit {s['exit_code']}, {s['seconds']} s)" for s in result.steps],
        "",
    ]
    for metric, path in result.charts.items():
        lines += [f"![{metric}]({path.rsplit('/', 1)[-1]})", ""]
    (result.run_dir / "report.md").write_text("\n".join(lines), encoding="utf-8")
