"""The registry of job kinds: everything the routes, the executors, the scheduler and the worker need to know about
a kind of job (SFT, RL, or one registered from outside), in one place. Nothing else branches on a kind's name.

A kind's parts that belong to its trainer are named by `module:function` and imported only when used: the API
process reads settings (pure Python) but never imports the training stack (torch), which only the worker loads.
The executors and the routes call these hooks through the kind; they never import a trainer.

Another kind is added without editing this file: a module that calls `register_kind(JobKind(...))` at import,
named in SYNTH_AI_JOB_KINDS (comma-separated module paths). The registry imports those modules on first use, in the
API process and in every worker process alike (a worker inherits the backend's environment), so both sides know the
kind. docs/architecture.md ("A job kind") shows one.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.backend.http_errors import ApiError
from synth_ai.config.job_specs import JobSpec, RLJobSpec, SFTJobSpec
from synth_ai.errors import SynthError
from synth_ai.models.job_ids import ID_PREFIXES

EXTENSIONS_ENV = "SYNTH_AI_JOB_KINDS"
# The built-in kinds' names (their registry entries below), for their routes' lookups (`job_kind(RL_KIND)`).
SFT_KIND = "sft"
RL_KIND = "rl"
TINKER_KIND = "tinker"


@dataclass(frozen=True)
class JobKind:
    name: str  # the jobs table's `kind`, and the prefix of the job's events ("sft.job.created")
    training_type: str  # stored when the body names none
    id_prefix: str  # job ids look like "<id_prefix>_<hex>"
    body_check: str  # "module:function": the create body checked and normalised, or an ApiError(400)
    settings: str  # "module:function"(spec): the spec read into the trainer's settings (no torch)
    runner: str  # "module:function"(spec, *, workdir, model_store, reporter, should_stop): imported by the worker
    package: str  # the trainer package; without it the kind is not available here
    spec_type: type[JobSpec] = JobSpec  # how the stored payload is read
    list_route: str = "GET /api/learning/jobs"  # where a client lists jobs of this kind (said in a 404's hint)
    checkpoint_unit: str = "step"  # what a checkpoint's number counts (the dashboard's label)
    resumable: bool = True  # a run cut short resumes from its last checkpoint in a new worker
    # held open by a client (a Tinker training client): runs beside batch jobs, up to max_interactive_jobs of them,
    # instead of waiting for a batch job's slot
    interactive: bool = False
    modal_extras: tuple[str, ...] = ("train",)  # this package's extras a Modal container installs for the job
    # Optional hooks, "module:function"; None: the kind has nothing to say there.
    training_gpus: str | None = None  # (spec, local_gpus, gpu_count) -> GPUs that train (torchrun's rank count)
    # (spec, model_store, *, gpus, ranks): refuse at create what cannot run on this machine (ranks: the executor's)
    local_check: str | None = None
    remote_secrets: str | None = None  # (spec, data_dir, environ) -> {name: value} a remote container needs
    remote_setup: str | None = None  # () -> None: prepare a remote container's environment before the worker runs

    @property
    def event_prefix(self) -> str:
        return self.name

    def available(self) -> bool:
        try:
            return importlib.util.find_spec(self.package) is not None
        except (ImportError, ValueError):
            return False

    def spec_of(self, payload: Any, *, job_id: str = "local", model: str | None = None,
                files: Mapping[str, str] | None = None) -> JobSpec:
        """The typed view of a stored (or just checked) payload."""
        return self.spec_type(payload if isinstance(payload, Mapping) else {}, job_id=job_id, model=model,
                              files=dict(files or {}))

    def check_body(self, body: Any, **context: Any) -> dict[str, Any]:
        return _load(self.body_check)(body, **context)

    def resolve_settings(self, spec: JobSpec) -> Any:
        return _load(self.settings)(spec)

    def check_settings(self, spec: JobSpec) -> None:
        """Let the trainer read the settings now, so that a value only it refuses is a 400, not a failed job."""
        try:
            self.resolve_settings(spec)
        except SynthError as exc:
            details = exc.details if isinstance(exc.details, dict) else {}
            raise ApiError(400, details.get("code", "invalid_job"), exc.message, hint=exc.hint,
                           details={"field": details["field"]} if "field" in details else None) from None

    def run(self, spec: JobSpec, **context: Any) -> dict[str, Any]:
        return _load(self.runner)(spec, **context) or {}

    def gpus_that_train(self, spec: JobSpec, local_gpus: int, gpu_count: int) -> int:
        """Of the job's `[compute].gpu_count`, the GPUs its training ranks use (the rest may serve rollouts)."""
        return _load(self.training_gpus)(spec, local_gpus, gpu_count) if self.training_gpus else gpu_count

    def check_runnable_here(self, spec: JobSpec, model_store: Any, *, gpus: int, ranks: int = 1) -> None:
        """Raise a SynthError (its `details.code` the 400's code) for a job this machine could not run over `ranks`
        processes (what the backend's executor would start)."""
        if self.local_check:
            _load(self.local_check)(spec, model_store, gpus=gpus, ranks=ranks)

    def secrets_for(self, spec: JobSpec, data_dir: Path | None,
                    environ: Mapping[str, str] | None = None) -> dict[str, str]:
        return dict(_load(self.remote_secrets)(spec, data_dir, environ)) if self.remote_secrets else {}

    def prepare_remote(self) -> None:
        if self.remote_setup:
            _load(self.remote_setup)()


def _load(reference: str) -> Callable[..., Any]:
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


KINDS: dict[str, JobKind] = {kind.name: kind for kind in (
    JobKind(name="sft", training_type="sft_offline", id_prefix=ID_PREFIXES["sft"],
            body_check="synth_ai.backend.jobs.job_bodies:check_sft_body",
            settings="synth_ai.backend.trainers.sft.sft_settings:resolve_settings",
            runner="synth_ai.backend.trainers.sft.trainer:run_sft", package="synth_ai.backend.trainers.sft",
            spec_type=SFTJobSpec),
    JobKind(name="rl", training_type="rl_online", id_prefix=ID_PREFIXES["rl"],
            body_check="synth_ai.backend.jobs.job_bodies:check_rl_body",
            settings="synth_ai.backend.trainers.rl.rl_settings:check_rl_job",
            runner="synth_ai.backend.trainers.rl.loop:run_rl", package="synth_ai.backend.trainers.rl",
            spec_type=RLJobSpec, list_route="GET /api/rl/jobs", checkpoint_unit="iteration",
            modal_extras=("train", "vllm"),
            training_gpus="synth_ai.backend.trainers.rl.topology:training_gpus_of",
            local_check="synth_ai.backend.trainers.rl.local_check:refuse_unrunnable_here",
            remote_secrets="synth_ai.backend.trainers.rl.job_secrets:job_secrets",
            remote_setup="synth_ai.backend.trainers.rl.policy_exposure:reach_policy_through_modal_tunnel"),
    # a Tinker SDK training client (routes/tinker_api.py): made by the Tinker API's create_model, never posted; it
    # holds its state in memory, so a worker that dies does not resume it (its futures fail instead)
    JobKind(name=TINKER_KIND, training_type="tinker", id_prefix=ID_PREFIXES["tinker"],
            body_check="synth_ai.config.tinker_settings:check_body",
            settings="synth_ai.config.tinker_settings:read_settings",
            runner="synth_ai.backend.trainers.tinker.serve:run", package="synth_ai.backend.trainers.tinker",
            list_route="GET /api/learning/jobs", resumable=False, interactive=True),
)}
_loaded_extensions: set[str] = set()


def register_kind(kind: JobKind) -> JobKind:
    """Add a kind (see the module doc). Registering the same kind again is a no-op; another under a taken name or
    id prefix is refused (job ids and events must say which kind they belong to)."""
    for known in KINDS.values():
        if known == kind:
            return kind
        if kind.name == known.name or kind.id_prefix == known.id_prefix:
            raise ValueError(f"job kind {kind.name!r} (id prefix {kind.id_prefix!r}) clashes with the registered "
                             f"kind {known.name!r} (id prefix {known.id_prefix!r})")
    KINDS[kind.name] = kind
    return kind


def _load_extensions() -> None:
    for module in os.environ.get(EXTENSIONS_ENV, "").split(","):
        module = module.strip()
        if module and module not in _loaded_extensions:
            _loaded_extensions.add(module)
            importlib.import_module(module)


def find_kind(name: str) -> JobKind | None:
    """The kind registered under `name`, None when there is none."""
    _load_extensions()
    return KINDS.get(name)


def interactive_kinds() -> list[str]:
    """The names of the kinds a client holds open (`JobKind.interactive`): the scheduler's second pool."""
    _load_extensions()
    return [kind.name for kind in KINDS.values() if kind.interactive]


def job_kind(name: str) -> JobKind:
    kind = find_kind(name)
    if kind is None:
        raise ValueError(f"unknown job kind {name!r}; known: {', '.join(KINDS)}")
    return kind
