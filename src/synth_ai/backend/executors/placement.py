"""Which executor runs a job: the backend's choice (`--executor` / SYNTH_AI_BACKEND_EXECUTOR), overridden per job
when the job asks for more than this machine has.

A job's needs come from its payload: `[compute] gpu_type / gpu_count / nodes` (SFT: `metadata.effective_config.
compute`; RL: `compute` or `data.config.compute`) and the model's size from the registry (a fine-tune counts as its
base). The rule (docs/scale.md):

- models up to CPU_MAX_PARAMS_B (the tiny models, Qwen3-0.6B/1.7B) run anywhere; their `[compute]` describes hosted
  hardware and is ignored here, as it always was;
- a bigger model needs GPUs: the local and torchrun executors take it when this machine has at least gpu_count
  GPUs and the job asks for one node (or, under a multi-node torchrun backend, at most its nodes), else it goes to
  Modal when Modal is usable, else the job is refused with what would run it - never a silent CPU run of a 32B
  model.

This module is imported by the API process: no torch, no modal (GPUs are counted from /dev and CUDA_VISIBLE_DEVICES).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any

from synth_ai.backend.executors.torchrun_command import NodePlace
from synth_ai.backend.jobs.kinds import find_kind
from synth_ai.backend.jobs.launching import NoExecutorError
from synth_ai.backend.server_settings import (  # noqa: F401 - the names and their check are re-exported here
    EXECUTORS,
    MODAL_TOKEN_HINT,
    check_executor_name,
    modal_token_configured,
)
from synth_ai.backend.store.db import loads
from synth_ai.config.job_specs import JobSpec
from synth_ai.models.registry import model_params_b, parse_params_b  # noqa: F401 - also re-exported

CPU_MAX_PARAMS_B = 2.0
GPU_COUNT_ENV = "SYNTH_AI_BACKEND_GPUS"  # overrides the count of local GPUs (tests, containers without /dev/nvidia*)


@dataclass(frozen=True)
class JobNeeds:
    kind: str
    model: str
    params_b: float | None  # None: unknown size (a local folder, an unlisted model)
    gpu_type: str | None
    gpu_count: int
    nodes: int

    @property
    def gpus(self) -> int:
        return self.gpu_count * self.nodes

    @property
    def needs_gpu(self) -> bool:
        return self.params_b is not None and self.params_b > CPU_MAX_PARAMS_B

    def describe(self) -> str:
        size = f"{self.params_b:g}B parameters" if self.params_b is not None else "unknown size"
        hw = f"{self.gpu_count} x {self.gpu_type or 'GPU'}" + (f" on {self.nodes} nodes" if self.nodes > 1 else "")
        return f"{self.model} ({size}) on {hw}"


def _compute_of(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """`[compute]` where the kind's spec says it lives (SFT: `metadata.effective_config.compute`; RL: `compute` or
    `data.config.compute`)."""
    job = find_kind(kind)
    return (job.spec_type if job is not None else JobSpec).of(payload).compute


def job_needs(kind: str, model: str, payload: dict[str, Any]) -> JobNeeds:
    compute = _compute_of(kind, payload)

    def count(key: str) -> int:
        value = compute.get(key, 1)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

    gpu_type = compute.get("gpu_type") if isinstance(compute.get("gpu_type"), str) else None
    return JobNeeds(kind=kind, model=model, params_b=model_params_b(model), gpu_type=gpu_type,
                    gpu_count=count("gpu_count"), nodes=count("nodes"))


def row_needs(row: Any) -> JobNeeds:
    """A stored job's needs, from its row (kind, model, payload)."""
    payload = loads(row["payload"]) or {}
    return job_needs(row["kind"], row["model"], payload if isinstance(payload, dict) else {})


def local_gpu_count() -> int:
    raw = os.environ.get(GPU_COUNT_ENV, "").strip()
    if raw.isdigit():
        return int(raw)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    return len(glob.glob("/dev/nvidia[0-9]*"))


def choose(backend_executor: str, needs: JobNeeds, *, gpus: int | None = None) -> str:
    """The executor for this job, or NoExecutorError saying what would run it."""
    gpus = local_gpu_count() if gpus is None else gpus
    if backend_executor == "modal":
        return "modal"
    # a multi-node torchrun backend (`backend serve --nnodes`) spans its nodes; each is taken to have this one's GPUs
    nodes_here = NodePlace.from_env().nodes if backend_executor == "torchrun" else 1
    fits_here = not needs.needs_gpu or (needs.nodes <= nodes_here and gpus >= needs.gpu_count)
    if fits_here:
        return backend_executor
    if modal_token_configured():
        return "modal"
    here = f"{gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "no GPU"
    raise NoExecutorError(
        f"This job trains {needs.describe()}, and this backend has {here} and no Modal token: nothing here can run "
        f"it (a {needs.params_b:g}B model is not trained on CPU).",
        hint=f"{MODAL_TOKEN_HINT} Or run the backend on a machine with {needs.gpus} GPUs "
             f"(`synth-ai backend serve --executor torchrun`), or pick a model of at most {CPU_MAX_PARAMS_B:g}B "
             "parameters for CPU training.",
        details={"model": needs.model, "params_b": needs.params_b, "gpu_type": needs.gpu_type,
                 "gpu_count": needs.gpu_count, "nodes": needs.nodes, "local_gpus": gpus})
