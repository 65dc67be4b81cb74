"""The demo's ending: what a run found (`DemoResult`), the table of models and their held-out scores, and
`report.md` in the run folder."""

from __future__ import annotations

import shlex
import tomllib
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
        "## Steps",
        "",
        *[f"- {s['step']}: `{s['command']}` (exit {s['exit_code']}, {s['seconds']} s)" for s in result.steps],
        "",
        *rerun_section(result),
    ]
    for metric, path in result.charts.items():
        lines += [f"![{metric}]({path.rsplit('/', 1)[-1]})", ""]
    (result.run_dir / "report.md").write_text("\n".join(lines), encoding="utf-8")


def _flag_value(result: DemoResult, flag: str) -> str | None:
    """The value the steps' commands gave `flag` (the same in every step that has it)."""
    for step in result.steps:
        words = shlex.split(step["command"])
        if flag in words[:-1]:
            return words[words.index(flag) + 1]
    return None


def _task_app_url(result: DemoResult) -> str | None:
    """The task app the configs name (the held-out eval config, written before the first step)."""
    try:
        with (result.run_dir / "configs" / "eval_held_out.toml").open("rb") as handle:
            return tomllib.load(handle)["eval"]["task_app_url"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return None


def _port(url: str) -> str:
    return url.rstrip("/").removesuffix("/api").rsplit(":", 1)[-1]


def rerun_section(result: DemoResult) -> list[str]:
    """How to repeat a step: the commands name the demo's backend and task app by address, and the demo stops
    what it started when it ends, so say which services to start again, where, and with which key."""
    backend, task_app = _flag_value(result, "--backend"), _task_app_url(result)
    lines = ["## Re-running a step by hand", "",
             "Run the commands above from this folder. They reach two services, at the addresses they name:", ""]
    if backend:
        state = ("stopped when the demo ended: start it again on the same port with "
                 f"`synth-ai backend start --port {_port(backend)}`" if "backend" in result.stopped
                 else "left running (check with `synth-ai backend status`)")
        lines.append(f"- the backend at {backend}: {state};")
    if task_app:
        state = ("stopped when the demo ended: serve it again, in another terminal, with "
                 f"`synth-ai serve color-quiz --port {_port(task_app)}`" if "task app" in result.stopped
                 else "left running (`--keep`) with the demo's own key: to use yours, replace it with "
                 f"`synth-ai serve color-quiz --port {_port(task_app)} --force`")
        lines.append(f"- the color-quiz task app at {task_app} (named in `configs/*.toml`): {state}.")
    lines += ["", "The task app and the commands need the same ENVIRONMENT_API_KEY, and the demo's own was not kept: "
              "run `synth-ai setup --local` once in this folder; it writes one to `./.env`, which `serve`, `eval` and "
              "`train` read from here. A port that another program has taken since: start the service on another "
              "and change the address in the command (and in `configs/*.toml` for the task app).", ""]
    return lines
