"""What each step of an SFT plan does when submitted for real: the dataset(s) are validated locally on entering,
then `upload-*` → `wait-files-ready` → `create-job` → `start-job` (see `synth_ai.train.plan`)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from synth_ai.client.idempotency import IdempotencyStore, fingerprint
from synth_ai.client.resources import SynthAPI
from synth_ai.config.toml_source import display_path
from synth_ai.errors import InvalidInputError, NotFoundError
from synth_ai.train import plan
from synth_ai.train.prepare import PreparedTraining
from synth_ai.train.request_bodies import build_sft_payload
from synth_ai.train.submission import Hooks, Submitted, create_job

READY = {"ready", "stored", "complete", "completed", "processed", "succeeded"}
INVALID = {"invalid", "failed", "error", "rejected"}


class SftSteps:
    """Entering validates the dataset(s) (nothing is sent when one is invalid); the subset file `--examples`
    writes lives until the run leaves."""

    def __init__(self, prepared: PreparedTraining, api: SynthAPI, *, idempotency: str | None, examples: int | None,
                 hooks: Hooks, store: IdempotencyStore, clock: Callable[[], float],
                 sleep: Callable[[float], None]) -> None:
        self.config = prepared.config
        self.api, self.hooks, self.store = api, hooks, store
        self.idempotency, self.examples = idempotency, examples
        self.clock, self.sleep = clock, sleep
        self.scratch = tempfile.TemporaryDirectory(prefix="synth-ai-sft-")
        self.dataset = self.config.dataset
        self.sha256: dict[str, str | None] = {}
        self.files: list[dict[str, Any]] = []
        self.validation_id: str | None = None
        self.fingerprints: list[str] = []
        self.job_id = ""
        self.job: dict[str, Any] = {}
        self.earlier = False  # the job is the one an earlier run of this command made

    def __enter__(self) -> SftSteps:
        try:
            self._validate_locally()
        except BaseException:
            self.scratch.cleanup()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.scratch.cleanup()

    def actions(self) -> dict[str, Callable[[], None]]:
        return {plan.UPLOAD_TRAINING: self.upload_training, plan.UPLOAD_VALIDATION: self.upload_validation,
                plan.WAIT_READY: self.wait_ready, plan.CREATE_JOB: self.create, plan.START_JOB: self.start}

    def submitted(self) -> Submitted:
        return Submitted("sft", self.job_id, self.api.transport.api_base, job=self.job, files=self.files,
                         fingerprints=self.fingerprints)

    def _validate_locally(self) -> None:
        from synth_ai.datasets import first_n_records, validate_jsonl

        config, hooks = self.config, self.hooks
        model = config.model.canonical if config.model else None
        assert config.dataset is not None
        if self.examples is not None:
            self.dataset = Path(self.scratch.name) / f"{config.dataset.stem}.head{self.examples}.jsonl"
            count = first_n_records(config.dataset, self.examples, self.dataset)
            hooks.say(f"Using the first {count} record(s) of {display_path(config.dataset)}")
        hooks.say("Validating training dataset…")
        report = validate_jsonl(self.dataset, model=model)
        if not report.ok:
            raise InvalidInputError(f"{display_path(config.dataset)}: the dataset is invalid; nothing was uploaded.\n"
                                    + report.render(), hint="Fix the listed lines; `synth-ai files validate "
                                    f"{display_path(config.dataset)}` re-checks the file.",
                                    details=report.to_dict())
        for warning in report.warnings:
            hooks.warn(f"{display_path(config.dataset)}: {warning.render()}")
        self.sha256["training"] = report.sha256
        if config.validation_dataset is not None:
            hooks.say("Validating validation dataset…")
            validation = validate_jsonl(config.validation_dataset, model=model)
            if not validation.ok:
                raise InvalidInputError(f"{display_path(config.validation_dataset)}: the validation dataset is "
                                        "invalid; nothing was uploaded.\n" + validation.render(),
                                        details=validation.to_dict())
            self.sha256["validation"] = validation.sha256

    def upload_training(self) -> None:
        assert self.dataset is not None
        self.files.insert(0, self._upload(self.dataset, self.sha256["training"], "training dataset"))

    def upload_validation(self) -> None:
        assert self.config.validation_dataset is not None
        doc = self._upload(self.config.validation_dataset, self.sha256["validation"], "validation dataset")
        self.files.append(doc)
        self.validation_id = doc["id"]

    def wait_ready(self) -> None:
        for doc in self.files:
            _wait_ready(self.api, doc, self.hooks, clock=self.clock, sleep=self.sleep)

    def create(self) -> None:
        validation_ids = [self.validation_id] if self.validation_id is not None else None
        payload = build_sft_payload(self.config, training_file_id=self.files[0]["id"],
                                    validation_file_ids=validation_ids)
        created = create_job(self.api.sft, "sft.create", payload, idempotency=self.idempotency, store=self.store,
                             hooks=self.hooks)
        self.fingerprints.append(created.fingerprint)
        self.job_id, self.job, self.earlier = created.job_id, created.doc, created.earlier

    def start(self) -> None:
        start_fp = fingerprint("sft.start", self.api.transport.api_base, self.job_id)
        self.fingerprints.append(start_fp)
        started = self.api.sft.start(self.job_id, idempotency_key=self.store.key_for(start_fp))
        status = started.get("status") if isinstance(started, dict) else None
        if self.earlier and status not in {None, "queued", "created"}:
            # The earlier run's job, already under way or done: starting it again changed nothing.
            self.hooks.say(f"✓ Not started again: job {self.job_id} is the existing job, {status}")
            return
        self.hooks.say("✓ Job started")

    def _upload(self, path: Path, sha256: str | None, label: str) -> dict[str, Any]:
        size = path.stat().st_size
        fp = fingerprint("files.upload", self.api.transport.api_base, sha256 or str(path.resolve()), path.name, size)
        self.fingerprints.append(fp)
        with self.store.operation(fp):  # an identical command started meanwhile waits, then reuses this upload
            return self._upload_once(path, fp, label, size)

    def _upload_once(self, path: Path, fp: str, label: str, size: int) -> dict[str, Any]:
        api, hooks, store = self.api, self.hooks, self.store
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
