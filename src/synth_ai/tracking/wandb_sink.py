"""Weights & Biases: one run per job (its id the job id, so a restarted worker resumes it), metric points plotted
against their own `step`, sample tables as W&B Tables, the final model in the summary and tags. wandb itself reads
WANDB_API_KEY, WANDB_MODE (offline writes a `.wandb` file to sync later), WANDB_DIR and WANDB_ENTITY."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from synth_ai.tracking.settings import TrackingSettings
from synth_ai.tracking.tables import SampleTable

INIT_TIMEOUT_S = 60.0


class WandbSink:
    name = "wandb"
    fix = ("set WANDB_API_KEY in the environment of the process that runs the job (the backend), or "
           "WANDB_MODE=offline to write the run to disk and `wandb sync` it later")
    folder_setting = "WANDB_DIR"

    def __init__(self) -> None:
        self.run: Any = None
        self.wandb: Any = None

    def start(self, settings: TrackingSettings, config: dict[str, Any]) -> None:
        import wandb

        self.wandb = wandb
        _require_writable(settings.wandb_dir)  # wandb's own error would not name the folder
        self.run = wandb.init(dir=str(settings.wandb_dir), project=settings.wandb_project, name=settings.run_name,
                              id=_run_id(settings.run_id), resume="allow", tags=list(settings.tags) or None,
                              config=config, reinit="create_new",
                              settings=wandb.Settings(init_timeout=INIT_TIMEOUT_S, console="off", silent=True))
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")  # our steps may repeat or arrive late: no monotonic _step

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log({"step": step, **values})

    def table(self, table: SampleTable) -> None:
        data = self.wandb.Table(columns=list(table.columns), data=[list(r) for r in table.rows])
        self.run.log({"step": table.step, f"samples/{table.name}": data})

    def finish(self, summary: dict[str, Any], tags: list[str], status: str) -> None:
        for key, value in summary.items():
            self.run.summary[key] = value
        if tags:
            self.run.tags = tuple(dict.fromkeys([*(self.run.tags or ()), *tags]))
        self.run.finish(exit_code=0 if status == "succeeded" else 1)


def _run_id(run_id: str) -> str:
    """W&B run ids allow letters, digits, '-' and '_' only."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in run_id)[:128]


def _require_writable(folder: Path) -> None:
    """An OSError naming the folder when it cannot be made or written."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write in {folder} ({exc.strerror})", str(folder)) from None
