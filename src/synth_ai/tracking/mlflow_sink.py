"""MLflow: one run per job in the experiment `[logging].project` (else MLFLOW_EXPERIMENT_NAME), found again by its
`synth_ai.run_id` tag when a restarted worker resumes the job; metrics in batches, the resolved config as params
(flattened, values cut to MLflow's limit), sample tables as JSON artifacts, the final model and job id as tags.
MlflowClient reads MLFLOW_TRACKING_URI (default: ./mlruns) and MLflow's own credential variables."""

from __future__ import annotations

import json
import socket
import time
from typing import Any
from urllib.parse import urlsplit

from synth_ai.tracking.settings import TrackingSettings
from synth_ai.tracking.tables import SampleTable, as_records

RUN_ID_TAG = "synth_ai.run_id"
MAX_PARAM_CHARS = 500
MAX_PARAMS = 500
STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}
REACH_TIMEOUT_S = 5.0


class MlflowSink:
    name = "mlflow"
    fix = ("set MLFLOW_TRACKING_URI in the environment of the process that runs the job (the backend) to a tracking "
           "server or store it can reach")

    def __init__(self) -> None:
        self.client: Any = None
        self.run_id = ""

    def start(self, settings: TrackingSettings, config: dict[str, Any]) -> None:
        from mlflow import MlflowClient, get_tracking_uri

        _require_reachable(get_tracking_uri())  # else MLflow's client sits minutes in its retries, then fails
        self.client = MlflowClient()
        experiment = self.client.get_experiment_by_name(settings.mlflow_experiment)
        experiment_id = experiment.experiment_id if experiment is not None else \
            self.client.create_experiment(settings.mlflow_experiment)
        found = self.client.search_runs([experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{settings.run_id}'",
                                        max_results=1)
        if found:
            self.run_id = found[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            return
        tags = {RUN_ID_TAG: settings.run_id, **{t: "" for t in settings.tags}}
        self.run_id = self.client.create_run(experiment_id, run_name=settings.run_name, tags=tags).info.run_id
        self._params(config)

    def log(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key=_key(name), value=float(v), timestamp=now, step=int(step)) for name, v in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def table(self, table: SampleTable) -> None:
        name = table.name.replace("/", "_")
        self.client.log_text(self.run_id, json.dumps(as_records(table), indent=1, default=str),
                             f"samples/{name}/step_{table.step:06d}.json")

    def finish(self, summary: dict[str, Any], tags: list[str], status: str) -> None:
        for key, value in summary.items():
            if value is not None:
                self.client.set_tag(self.run_id, key, str(value)[:MAX_PARAM_CHARS])
        for tag in tags:
            self.client.set_tag(self.run_id, tag, "")
        if status in STATUS:  # an interrupted job resumes this run: it stays RUNNING
            self.client.set_terminated(self.run_id, status=STATUS[status])

    def _params(self, config: dict[str, Any]) -> None:
        from mlflow.entities import Param

        flat = list(_flatten(config).items())[:MAX_PARAMS]
        params = [Param(_key(k), str(v)[:MAX_PARAM_CHARS]) for k, v in flat]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
            self.client.log_batch(self.run_id, params=params[start:start + 100])


def _require_reachable(uri: str) -> None:
    """A tracking server (http/https URI) must accept a connection within seconds; a file store or database URI
    is left to MLflow."""
    parts = urlsplit(uri)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        where = f"{parts.scheme}://{parts.hostname}:{port}"  # no credentials from the URI
        raise ConnectionError(f"cannot reach the MLflow tracking server at {where} "
                              f"({exc.strerror or type(exc).__name__})") from None


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, inner in value.items():
            flat.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(value, list):
        return {prefix: json.dumps(value, default=str)}
    return {prefix: value}


def _key(name: str) -> str:
    """MLflow keys take letters, digits, '_', '-', '.', ' ', '/' (and ':' lately): anything else becomes '_'."""
    return "".join(c if c.isalnum() or c in "_-. /" else "_" for c in name)
