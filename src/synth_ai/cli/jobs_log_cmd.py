"""`synth-ai jobs log JOB --to wandb|tensorboard|mlflow`: replay a job's metrics, sample tables and outcome into an
experiment tracker, from any backend that speaks the learning API (the hosted one included)."""

# no `from __future__ import annotations`: the --kind option's type is the enum handed to register_log
from enum import Enum
from pathlib import Path

import typer

from synth_ai.cli.app import json_option, output_of
from synth_ai.cli.remote import backend_option, env_file_option, timeout_option


class TrackerName(str, Enum):
    wandb = "wandb"
    tensorboard = "tensorboard"
    mlflow = "mlflow"


def register_log(group: typer.Typer, kind_enum: type[Enum], kind_option, kind_name, api_of, first_that_knows) -> None:
    @group.command("log")
    def log_cmd(
        ctx: typer.Context,
        job_id: str = typer.Argument(..., help="Job id."),
        to: TrackerName = typer.Option(..., "--to", help="The tracker to write to: wandb, tensorboard or mlflow."),
        project: str = typer.Option(None, "--project", help="W&B project / MLflow experiment. Default: the job's "
                                    "[logging].project, else WANDB_PROJECT / MLFLOW_EXPERIMENT_NAME, else synth-ai."),
        run_name: str = typer.Option(None, "--run-name", help="The run's name. Default: the job's "
                                     "[logging].run_name, else the job id."),
        directory: Path = typer.Option(None, "--dir", help="TensorBoard: the folder to write the event file to. "
                                       "Default: <data dir>/tracking/tensorboard/<job id>-replay-<time>."),
        kind: kind_enum | None = kind_option(),  # type: ignore[valid-type]
        backend: str = backend_option(),
        env_file: list[str] = env_file_option(),
        timeout: float = timeout_option(),
        json_flag: bool = json_option(),
    ) -> None:
        """Replay a job's metrics into W&B, TensorBoard or MLflow (a new run each time; works for running jobs)."""
        import os

        from synth_ai.env.paths import data_dir
        from synth_ai.errors import UnavailableError
        from synth_ai.tracking.replay import replay_job

        out = output_of(ctx, json_flag)
        with api_of(out, backend, env_file, timeout) as api:
            jobs, _ = first_that_knows(api.families_for(job_id, kind_name(kind)), lambda family: family.get(job_id))
            result = replay_job(jobs, job_id, to=to.value, data_dir=data_dir(), environ=os.environ,
                                project=project, run_name=run_name, tensorboard_dir=directory)
        if result.failed:
            why = result.failed.get(to.value) or next(iter(result.failed.values()))
            raise UnavailableError(f"Could not log job {job_id} to {to.value}: {why}",
                                   details={"job_id": job_id, "tracker": to.value})
        doc = {"job_id": job_id, "to": to.value, "run_id": result.run_id, "run_name": result.run_name,
               "status": result.status, "points": result.points, "tables": result.tables, "where": result.where}
        out.result(doc, lambda o: o.info(f"Logged job {job_id} ({result.status}) to {to.value}: {result.points} "
                                         f"points, {result.tables} sample tables, run {result.run_name!r} in "
                                         f"{result.where}."))
