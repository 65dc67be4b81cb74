"""Submitting a prepared training run: SFT (validate → upload → wait ready → create → start) and RL (check the task
app locally → share its ENVIRONMENT_API_KEY with the backend, sealed → verify it through the backend → create). Following the job is `synth_ai.client.follow`.

Every create carries an idempotency key remembered per logical operation (`client/idempotency.py`), so running
the same command again after a crash, a timeout or Ctrl-C finds the same file and the same job.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth_ai.client.idempotency import IdempotencyStore, fingerprint
from synth_ai.client.resources import SynthAPI, job_id_of
from synth_ai.config.toml_source import display_path
from synth_ai.env.dotenv_files import get_env
from synth_ai.env.secrets import mask_secret
from synth_ai.errors import (
    AuthError,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
    error_for_exit_code,
)
from synth_ai.train.payloads import build_rl_payload, build_sft_payload
from synth_ai.train.prepare import PreparedTraining

READY = {"ready", "stored", "complete", "completed", "processed", "succeeded"}
INVALID = {"invalid", "failed", "error", "rejected"}
RESTARTABLE = {"failed", "cancelled", "canceled", "gone"}  # an earlier job in these does not block a new one


@dataclass
class Submitted:
    kind: str
    job_id: str
    api_base: str
    job: dict[str, Any] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    fingerprints: list[str] = field(default_factory=list)  # idempotency entries to forget once the job ends


@dataclass
class Hooks:
    """How the flow talks to the person running it (the CLI passes its output sink)."""

    say: Callable[[str], None] = lambda _m: None
    warn: Callable[[str], None] = lambda _m: None
    upload_progress: Callable[[str, int, int], None] | None = None  # (label, sent, total)
    # Called once the local checks passed, before the first request (the CLI asks whether the backend can train).
    preflight: Callable[[], None] = lambda: None


def submit(prepared: PreparedTraining, api: SynthAPI, *, idempotency: str | None, examples: int | None,
           hooks: Hooks, store: IdempotencyStore | None = None, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> Submitted:
    store = store or IdempotencyStore()
    if prepared.config.kind == "sft":
        return _submit_sft(prepared, api, idempotency=idempotency, examples=examples, hooks=hooks, store=store,
                           clock=clock, sleep=sleep)
    return _submit_rl(prepared, api, idempotency=idempotency, hooks=hooks, store=store)


# SFT ------------------------------------------------------------------------------------------------------------
def _submit_sft(prepared, api: SynthAPI, *, idempotency, examples, hooks: Hooks, store: IdempotencyStore,
                clock, sleep) -> Submitted:
    from synth_ai.datasets import first_n_records, validate_jsonl

    config = prepared.config
    api_base = api.transport.api_base
    model = config.model.canonical if config.model else None
    assert config.dataset is not None
    with tempfile.TemporaryDirectory(prefix="synth-ai-sft-") as scratch:
        dataset = config.dataset
        if examples is not None:
            dataset = Path(scratch) / f"{config.dataset.stem}.head{examples}.jsonl"
            count = first_n_records(config.dataset, examples, dataset)
            hooks.say(f"Using the first {count} record(s) of {display_path(config.dataset)}")
        hooks.say("Validating training dataset…")
        report = validate_jsonl(dataset, model=model)
        if not report.ok:
            raise InvalidInputError(f"{display_path(config.dataset)}: the dataset is invalid; nothing was uploaded.\n"
                                    + report.render(), hint="Fix the listed lines; `synth-ai files validate "
                                    f"{display_path(config.dataset)}` re-checks the file.",
                                    details=report.to_dict())
        for warning in report.warnings:
            hooks.warn(f"{display_path(config.dataset)}: {warning.render()}")
        validation_report = None
        if config.validation_dataset is not None:
            hooks.say("Validating validation dataset…")
            validation_report = validate_jsonl(config.validation_dataset, model=model)
            if not validation_report.ok:
                raise InvalidInputError(f"{display_path(config.validation_dataset)}: the validation dataset is "
                                        "invalid; nothing was uploaded.\n" + validation_report.render(),
                                        details=validation_report.to_dict())

        hooks.preflight()
        fingerprints: list[str] = []
        training = _upload(api, dataset, report.sha256, "training dataset", hooks, store, fingerprints)
        files = [training]
        validation_ids = None
        if validation_report is not None:
            validation = _upload(api, config.validation_dataset, validation_report.sha256, "validation dataset",
                                 hooks, store, fingerprints)
            files.append(validation)
            validation_ids = [validation["id"]]
        for doc in files:
            _wait_ready(api, doc, hooks, clock=clock, sleep=sleep)

    payload = build_sft_payload(config, training_file_id=training["id"], validation_file_ids=validation_ids)
    create_fp = fingerprint("sft.create", api_base, payload)
    fingerprints.append(create_fp)
    hooks.say(f"Creating the job: POST {api.transport.url('/learning/jobs')}")
    earlier = idempotency is None and _earlier_job_in_play(api.sft, store, create_fp, hooks)
    created = api.sft.create(payload, idempotency_key=store.key_for(create_fp, explicit=idempotency))
    job_id = job_id_of(created, api.transport.url("/learning/jobs"))
    store.remember(create_fp, job_id)
    _say_created(hooks, job_id, created, earlier)
    start_fp = fingerprint("sft.start", api_base, job_id)
    fingerprints.append(start_fp)
    api.sft.start(job_id, idempotency_key=store.key_for(start_fp))
    hooks.say("✓ Job started")
    return Submitted("sft", job_id, api_base, job=created if isinstance(created, dict) else {}, files=files,
                     fingerprints=fingerprints)


def _earlier_job_in_play(jobs, store: IdempotencyStore, create_fp: str, hooks: Hooks) -> bool:
    """Whether an earlier run of this command made a job that the create will answer with again (its key is
    kept). A job that ended `failed` or `cancelled` does not count: its key is dropped, so a new job is made, and
    the person is told which job that replaces and why."""
    if not store.has(create_fp):
        return False
    earlier_id = store.result(create_fp)
    if earlier_id is None:
        return True  # the earlier run crashed before it learnt the id: the key finds its job, if one was made
    try:
        status = str(jobs.get(earlier_id).get("status") or "").lower()
    except NotFoundError:
        status = "gone"
    if status in RESTARTABLE:
        store.forget(create_fp)
        hooks.say(f"Starting a new job: the earlier run of this command made job {earlier_id}, which "
                  f"{'no longer exists' if status == 'gone' else 'ended ' + status} (keys only stop duplicates of "
                  "jobs that are running or succeeded)")
        return False
    return True


def _say_created(hooks: Hooks, job_id: str, created: Any, earlier: bool) -> None:
    """A re-run of the same command gets the job its first run created (that is what the idempotency key is for);
    say so, rather than claim a new job."""
    if not earlier:
        hooks.say(f"✓ Job created (id={job_id})")
        return
    status = created.get("status", "unknown") if isinstance(created, dict) else "unknown"
    hooks.say(f"✓ Same job as an earlier run of this command (id={job_id}, status={status}); to train again "
              "instead, pass --idempotency with a new key")


def _upload(api: SynthAPI, path: Path, sha256: str | None, label: str, hooks: Hooks, store: IdempotencyStore,
            fingerprints: list[str]) -> dict[str, Any]:
    size = path.stat().st_size
    fp = fingerprint("files.upload", api.transport.api_base, sha256 or str(path.resolve()), path.name, size)
    fingerprints.append(fp)
    earlier = _earlier_upload(api, store.result(fp))
    if earlier is not None:  # a re-run (e.g. `--no-poll` to check on the job) does not send the bytes again
        hooks.say(f"✓ {label.capitalize()} already uploaded by an earlier run (id={earlier['id']}, "
                  f"status={earlier.get('status', 'unknown')})")
        return earlier
    hooks.say(f"Uploading {label}: {display_path(path)} ({size:,} bytes) to {api.transport.url('/files')}")
    progress = None
    if hooks.upload_progress is not None:
        def progress(sent: int, _label: str = label) -> None:
            hooks.upload_progress(_label, sent, size)  # type: ignore[misc]
    doc = api.files.upload(path, idempotency_key=store.key_for(fp), on_progress=progress)
    if isinstance(doc.get("id"), str):
        store.remember(fp, doc["id"])
    hooks.say(f"✓ {label.capitalize()} uploaded (id={doc['id']}, status={doc.get('status', 'unknown')})")
    return doc


def _earlier_upload(api: SynthAPI, file_id: str | None) -> dict[str, Any] | None:
    """The file an earlier run uploaded, when the backend still has it and has not rejected it."""
    if file_id is None:
        return None
    try:
        doc = api.files.get(file_id)
    except NotFoundError:
        return None
    status = str(doc.get("status") or "").lower() if isinstance(doc, dict) else "invalid"
    return doc if status not in INVALID else None


def _wait_ready(api: SynthAPI, doc: dict[str, Any], hooks: Hooks, *, clock, sleep) -> dict[str, Any]:
    """Poll the file until the backend says it is ready; `invalid` stops with the server's line errors."""
    size = int(doc.get("bytes") or 0)
    deadline = clock() + 60.0 + size / 10_000_000  # a minute, plus a second per 10 MB to validate
    while True:
        status = str(doc.get("status") or doc.get("state") or doc.get("storage_state") or "ready").lower()
        if status in READY:
            return doc
        if status in INVALID:
            errors = doc.get("errors") or doc.get("validation_errors") or []
            lines = "\n".join(f"  - {e.get('message', e) if isinstance(e, dict) else e}" for e in errors[:20])
            raise InvalidInputError(f"The backend rejected file {doc.get('id')} ({doc.get('filename', '')}): "
                                    f"status {status}.\n{lines}".rstrip(), hint="Fix the dataset and run again; "
                                    "no job was created.", details=doc)
        if clock() >= deadline:
            hooks.warn(f"File {doc.get('id')} is still '{status}'; continuing, the backend checks it again when "
                       "the job is created.")
            return doc
        sleep(1.0)
        doc = api.files.get(str(doc["id"]))


# RL -------------------------------------------------------------------------------------------------------------
def _submit_rl(prepared, api: SynthAPI, *, idempotency, hooks: Hooks, store: IdempotencyStore) -> Submitted:
    from synth_ai.taskapp.verify import check_health, check_task_info

    config = prepared.config
    task_url = config.task_url
    assert task_url
    env_key = get_env("ENVIRONMENT_API_KEY")
    if not env_key:
        raise AuthError("ENVIRONMENT_API_KEY is required for RL: the trainer and this check call the task app "
                        "with it.", hint="Run `synth-ai setup --local`, or pass --env-file with "
                        "ENVIRONMENT_API_KEY=...")
    hooks.preflight()  # can this backend train at all? (before anything is shared or created)
    # Locally first: only a key this task app accepts is worth handing to the backend.
    hooks.say("Performing task app health check…")
    aliases = [a.strip() for a in os.environ.get("ENVIRONMENT_API_KEY_ALIASES", "").split(",") if a.strip()]
    for probe in (check_health, check_task_info):
        check = probe(task_url, env_key, aliases=aliases, timeout=_probe_timeout(api))
        if not check.ok:
            raise error_for_exit_code(check.exit_code, f"Task app check failed: {check.name}: {check.message}",
                                      hint=f"Check the task app at {task_url} (`synth-ai task-app validate --url "
                                           f"{task_url}`).")
    hooks.say("Task app healthy")
    _share_env_key(api, env_key, hooks)
    hooks.say(f"Verifying the task app through the backend: POST {api.transport.url('/rl/verify_task_app')}")
    verdict = api.rl.verify_task_app(task_url)
    if not (isinstance(verdict, dict) and verdict.get("any_ok")):
        raise AuthError(f"The backend could not use the task app at {task_url}: no key/header combination was "
                        "accepted by /health and /task_info.", hint="Check that the task app runs and that its "
                        "ENVIRONMENT_API_KEY is registered with the backend (`synth-ai setup --local`).",
                        details=verdict)
    hooks.say("Verification OK")
    payload = build_rl_payload(config, api_base=api.transport.api_base)
    create_fp = fingerprint("rl.create", api.transport.api_base, payload)
    hooks.say(f"Creating the job: POST {api.transport.url('/rl/jobs')}")
    earlier = idempotency is None and _earlier_job_in_play(api.rl, store, create_fp, hooks)
    created = api.rl.create(payload, idempotency_key=store.key_for(create_fp, explicit=idempotency))
    job_id = job_id_of(created, api.transport.url("/rl/jobs"))
    store.remember(create_fp, job_id)
    _say_created(hooks, job_id, created, earlier)
    return Submitted("rl", job_id, api.transport.api_base, job=created if isinstance(created, dict) else {},
                     fingerprints=[create_fp])


def _probe_timeout(api: SynthAPI) -> float:
    """A task-app check's timeout: its usual 10 s, cut to what the command's deadline leaves."""
    from synth_ai.taskapp.verify import DEFAULT_TIMEOUT_S

    left = api.transport.time_left()
    return DEFAULT_TIMEOUT_S if left is None else max(0.1, min(DEFAULT_TIMEOUT_S, left))


def _share_env_key(api: SynthAPI, env_key: str, hooks: Hooks) -> None:
    """Hand the backend the task app's key (sealed), so its worker can call the app; a backend without the
    env-key routes keeps the keys it already has (the create-time probe says if none works)."""
    from synth_ai.client.env_keys import EnvKeys

    hooks.say(f"Sharing ENVIRONMENT_API_KEY ({mask_secret(env_key)}) with the backend, sealed: "
              f"POST {api.transport.url('/v1/env-keys')}")
    try:
        EnvKeys(api.transport).upload(env_key)
    except (NotFoundError, UnavailableError) as exc:
        hooks.warn(f"The key was not shared ({exc.message}); the backend uses the keys it already knows.")
