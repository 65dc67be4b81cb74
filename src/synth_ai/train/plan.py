"""A `train` run as one ordered list of named steps, each with the request it makes: `--dry-run` prints this list
and submission (`synth_ai.train.submit`) executes it, step by step, so the two cannot drift apart.

Values only known once the run is under way (the uploaded file's id, the created job's id) appear as
`<...>` placeholders; secrets appear masked.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.config.loaded import LoadedConfig
from synth_ai.env.backend_url import BackendTarget
from synth_ai.env.secrets import mask_secret
from synth_ai.train.request_bodies import build_rl_payload, build_sft_payload
from synth_ai.urls import join_url

FILE_ID = "<training file id, from the upload>"
VALIDATION_FILE_ID = "<validation file id, from the upload>"
JOB_ID = "<job id, from the create response>"
IDEMPOTENCY_AT_SUBMIT = "<generated at submit, reused across retries>"

# Step names: submission looks each one up to know what to run.
UPLOAD_TRAINING = "upload-training-dataset"
UPLOAD_VALIDATION = "upload-validation-dataset"
WAIT_READY = "wait-files-ready"
CREATE_JOB = "create-job"
START_JOB = "start-job"
CHECK_HEALTH = "check-task-app-health"
CHECK_TASK_INFO = "check-task-app-task-info"
SHARE_ENV_KEY = "share-environment-key"
VERIFY_TASK_APP = "backend-verifies-task-app"


@dataclass
class Step:
    name: str
    description: str
    method: str
    url: str
    headers: dict[str, str]
    json: Any = None
    multipart: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "step": self.description, "method": self.method, "url": self.url,
                               "headers": self.headers}
        if self.json is not None:
            doc["json"] = self.json
        if self.multipart is not None:
            doc["multipart"] = self.multipart
        return doc


@dataclass
class TrainPlan:
    kind: str
    backend: BackendTarget
    requests: list[Step] = field(default_factory=list)


def _auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {mask_secret(api_key)}" if api_key else "Bearer <SYNTH_API_KEY is not set>"}


def describe_upload(path: Path, *, limit: int | None = None) -> dict[str, Any]:
    """The multipart parts of a dataset upload; with `limit`, only the first N non-blank lines are sent, each
    ending in a newline (the subset file `train --examples N` writes and uploads)."""
    digest, size, records = hashlib.sha256(), 0, 0
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                if limit is not None and records >= limit:
                    break
                records += 1
            elif limit is not None:
                continue
            if limit is not None and not line.endswith(b"\n"):
                line += b"\n"
            digest.update(line)
            size += len(line)
    name = path.name if limit is None else f"{path.stem}.head{limit}.jsonl"
    return {
        "purpose": "fine-tune",
        "file": {"filename": name, "content_type": "application/jsonl", "path": str(path), "bytes": size,
                 "sha256": digest.hexdigest(), "records": records},
    }


def _idempotency_key(idempotency: str | None, purpose: str | None = None) -> str:
    """Each POST gets its own key (a backend deduplicates by key, so two uploads sharing one would collide): the
    `--idempotency` value is the job creation's key; uploads and the start get keys generated at submit."""
    return idempotency if idempotency and purpose is None else IDEMPOTENCY_AT_SUBMIT


def plan_sft(config: LoadedConfig, backend: BackendTarget, *, api_key: str | None, examples: int | None,
             idempotency: str | None) -> TrainPlan:
    """Upload the dataset(s) → wait until the backend marks them ready → create the job → start it."""
    assert config.dataset is not None
    api = backend.api_base
    auth = _auth_headers(api_key)
    plan = TrainPlan("sft", backend)
    plan.requests.append(Step(UPLOAD_TRAINING, "upload training dataset", "POST", f"{api}/files",
                              {**auth, "Idempotency-Key": _idempotency_key(idempotency, "upload-training")},
                              multipart=describe_upload(config.dataset, limit=examples)))
    validation_ids = None
    if config.validation_dataset is not None:
        plan.requests.append(Step(UPLOAD_VALIDATION, "upload validation dataset", "POST", f"{api}/files",
                                  {**auth, "Idempotency-Key": _idempotency_key(idempotency, "upload-validation")},
                                  multipart=describe_upload(config.validation_dataset)))
        validation_ids = [VALIDATION_FILE_ID]
    plan.requests.append(Step(WAIT_READY, "wait until the file is ready", "GET", f"{api}/files/{FILE_ID}",
                              dict(auth)))
    payload = build_sft_payload(config, training_file_id=FILE_ID, validation_file_ids=validation_ids)
    plan.requests.append(Step(CREATE_JOB, "create the job", "POST", f"{api}/learning/jobs",
                              {**auth, "Content-Type": "application/json",
                               "Idempotency-Key": _idempotency_key(idempotency)}, json=payload))
    plan.requests.append(Step(START_JOB, "start the job", "POST", f"{api}/learning/jobs/{JOB_ID}/start",
                              {**auth, "Content-Type": "application/json",
                               "Idempotency-Key": _idempotency_key(idempotency, "start")}, json={}))
    return plan


def plan_rl(config: LoadedConfig, backend: BackendTarget, *, api_key: str | None, env_key: str | None,
            idempotency: str | None) -> TrainPlan:
    """Check the task app locally → share its key with the backend, sealed → the backend verifies the app →
    create the job. `env_key` is the ENVIRONMENT_API_KEY submission will send (`get_env`: aliases and saved keys
    included)."""
    assert config.task_url is not None
    api = backend.api_base
    auth = _auth_headers(api_key)
    masked_env_key = mask_secret(env_key) if env_key else "<ENVIRONMENT_API_KEY is not set>"
    task_headers = {"X-API-Key": masked_env_key, "X-API-Keys": masked_env_key,
                    "Authorization": f"Bearer {masked_env_key}"}
    json_auth = {**auth, "Content-Type": "application/json"}
    plan = TrainPlan("rl", backend)
    plan.requests.append(Step(CHECK_HEALTH, "check task app health", "GET", join_url(config.task_url, "health"),
                              task_headers))
    plan.requests.append(Step(CHECK_TASK_INFO, "check task app task_info", "GET",
                              join_url(config.task_url, "task_info"), dict(task_headers)))
    sealed = (f"<ENVIRONMENT_API_KEY ({masked_env_key}) sealed to the key from GET {api}/v1/crypto/public-key>"
              if env_key else masked_env_key)
    plan.requests.append(Step(SHARE_ENV_KEY, "share ENVIRONMENT_API_KEY with the backend, sealed", "POST",
                              f"{api}/v1/env-keys", dict(json_auth),
                              json={"name": "ENVIRONMENT_API_KEY", "ciphertext_b64": sealed}))
    plan.requests.append(Step(VERIFY_TASK_APP, "backend verifies the task app", "POST", f"{api}/rl/verify_task_app",
                              dict(json_auth), json={"endpoint_base_url": config.task_url}))
    payload = build_rl_payload(config, api_base=api)
    plan.requests.append(Step(CREATE_JOB, "create the job", "POST", f"{api}/rl/jobs",
                              {**json_auth, "Idempotency-Key": _idempotency_key(idempotency)}, json=payload))
    return plan
