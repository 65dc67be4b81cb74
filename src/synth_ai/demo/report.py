"""The demo's ending: what a run found (`DemoResult`), the table of models and their held-out scores, and
`report.md` in the run folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ModelScore:
    label: str
    model: str
    score: float | None
    job_id: str | None = None
    errors: int = 0


@dataclass
class DemoResult:
    run_dir: Path
    fast: bool
    scores: list[ModelScore] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    charts: dict[str, str] = field(default_factory=dict)
    sft_examples: int = 0
    seconds: float = 0.0
    stopped: list[str] = field(default_factory=list)

    @property
    def baseline(self) -> float | None:
        return self.scores[0].score if self.scores else None

    @property
    def final(self) -> float | None:
        return self.scores[-1].score if self.scores else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir), "fast": self.fast, "seconds": round(self.seconds, 1),
            "baseline": self.baseline, "final": self.final,
            "improvement": None if self.baseline is None or self.final is None else self.final - self.baseline,
            "models": [{"label": s.label, "model": s.model, "score": s.score, "job_id": s.job_id,
                        "errors": s.errors} for s in self.scores],
            "sft_examples": self.sft_examples, "steps": self.steps, "charts": self.charts,
            "stopped": self.stopped,
        }



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
