"""Typed views of a job's stored payload: `JobSpec` (any kind), `SFTJobSpec` and `RLJobSpec`.

A job's create body is checked once (`backend/jobs/job_bodies.py`) and stored as JSON, exactly as the wire sent
it: jobs already in a user's database and the 0.2.17 wire format stay readable. A spec does not copy or reshape that
payload; it names where each part lives (`spec.config`, `spec.task_url`, `spec.compute`), so the create routes, the
executors and the trainers read a job through the same names instead of each digging `payload["data"]["config"]`
out by hand. The backend's job-kind registry says which spec type a kind's payload is read with.

Pure Python (no pydantic, no torch): the API process, the executors and the worker all build specs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

# Keys the worker used to mix into the payload for the trainer (the older flat dict form of a spec).
FLAT_FILE_KEYS = {"training": "training_file_path", "validation": "validation_file_path"}

SpecT = TypeVar("SpecT", bound="JobSpec")


def _table(holder: Any, key: str) -> dict[str, Any]:
    value = holder.get(key) if isinstance(holder, Mapping) else None
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class JobSpec:
    """One job as its run sees it: the stored payload, the job's id and model, and the local paths of its files."""

    payload: Mapping[str, Any] = field(default_factory=dict)  # the stored create body, unchanged
    job_id: str = "local"
    model: str | None = None  # the job row's model (canonical id); None before the job is stored
    files: Mapping[str, str] = field(default_factory=dict)  # role ("training", "validation") -> local path

    @classmethod
    def of(cls: type[SpecT], spec: Any) -> SpecT:
        """`spec` as this type: a spec of another type is re-read, a dict is the older flat form (the payload with
        `job_id`, `model` and `*_file_path` mixed in, as the worker built it and benches and tests still do)."""
        if isinstance(spec, cls):
            return spec
        if isinstance(spec, JobSpec):
            return cls(spec.payload, job_id=spec.job_id, model=spec.model, files=spec.files)
        flat = dict(spec) if isinstance(spec, Mapping) else {}
        files = {role: str(flat.pop(key)) for role, key in FLAT_FILE_KEYS.items() if flat.get(key)}
        job_id = str(flat.pop("job_id", None) or "local")
        model = flat.get("model") if isinstance(flat.get("model"), str) else None
        return cls(flat, job_id=job_id, model=model, files=files)

    def get(self, key: str, default: Any = None) -> Any:
        """A top-level key of the payload."""
        return self.payload.get(key, default)

    @property
    def model_id(self) -> str | None:
        """The model the job trains: the job row's (canonical), else the body's `model`."""
        named = self.model or self.payload.get("model")
        return named.strip() if isinstance(named, str) and named.strip() else None

    @property
    def config(self) -> dict[str, Any]:
        """The job's config as the TOML had it ({} when the payload carries none)."""
        return {}

    @property
    def compute(self) -> dict[str, Any]:
        """`[compute]` (gpu_type, gpu_count, nodes): what hardware the job asks for."""
        return _table(self.payload, "compute")

    @property
    def task_url(self) -> str | None:
        """The task app the job calls while it runs (None: it calls none)."""
        return None

    @property
    def given_environment_keys(self) -> list[str]:
        """ENVIRONMENT_API_KEYs sent with the job (the create route moves them out of what is stored)."""
        return []


@dataclass(frozen=True)
class SFTJobSpec(JobSpec):
    """An SFT payload (reference §2.3): `model`, `hyperparameters`, `metadata.effective_config`, file ids."""

    @property
    def hyperparameters(self) -> Any:
        """The body's `hyperparameters` as sent (the settings reader refuses one that is not a table)."""
        return self.payload.get("hyperparameters")

    @property
    def effective_config(self) -> Any:
        """`metadata.effective_config` as sent (None when absent; the settings reader refuses a non-table)."""
        metadata = self.payload.get("metadata")
        return metadata.get("effective_config") if isinstance(metadata, Mapping) else None

    @property
    def config(self) -> dict[str, Any]:
        effective = self.effective_config
        return effective if isinstance(effective, dict) else {}

    @property
    def compute(self) -> dict[str, Any]:
        return _table(self.config, "compute")

    @property
    def training_file_path(self) -> str | None:
        return self.files.get("training")

    @property
    def validation_file_path(self) -> str | None:
        return self.files.get("validation")


@dataclass(frozen=True)
class RLJobSpec(JobSpec):
    """An RL payload (reference §2.2): `data.{endpoint_base_url, config, base_model | model}`."""

    @property
    def data(self) -> dict[str, Any]:
        return _table(self.payload, "data")

    @property
    def config(self) -> dict[str, Any]:
        return _table(self.data, "config")

    @property
    def model_id(self) -> str | None:
        """The model the job starts from: the body's fine-tuned source or base model, else the job row's."""
        named = self.data.get("model") or self.data.get("base_model") or self.model or self.payload.get("model")
        return named.strip() if isinstance(named, str) and named.strip() else None

    @property
    def task_url(self) -> str | None:
        url = self.data.get("endpoint_base_url")
        return url.rstrip("/") if isinstance(url, str) and url.strip() else None

    @property
    def compute(self) -> dict[str, Any]:
        return _table(self.payload, "compute") or _table(self.config, "compute")

    @property
    def topology(self) -> dict[str, Any]:
        """`[topology]` (or `[compute.topology]`, in the config or at the top of the payload); {} when none."""
        config = self.config
        for holder in (config, config.get("compute"), self.payload, self.payload.get("compute")):
            if isinstance(holder, Mapping) and isinstance(holder.get("topology"), dict):
                return holder["topology"]
        return {}

    @property
    def vllm(self) -> dict[str, Any] | None:
        """The `[vllm]` table, None when the job has none (an empty table still asks for vLLM)."""
        table = self.config.get("vllm")
        return table if isinstance(table, dict) else None

    @property
    def given_environment_keys(self) -> list[str]:
        given = [self.payload.get("environment_api_key"), self.data.get("environment_api_key")]
        return [k for k in given if isinstance(k, str) and k.strip()]
