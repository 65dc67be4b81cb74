"""Upload → create → follow flows driven through our real client (`synth_ai.client`, `synth_ai.train.submit`),
for the transient-fault harness.

Kinds of flow, each with the end it must reach:

    train     `synth-ai train`'s own code path (validate, upload, create, start) → cancel → follow: `cancelled`
    create    upload → create (not started, so no worker process) → cancel → follow: `cancelled`
    reject    upload → a create the backend refuses (learning_rate 0) → `rejected` (400, no job)
    succeed   `synth-ai train`'s code path on the tiny local Qwen3, followed to the end: `succeeded`, with a model

A flow that ends in a transient error (the transport gave up after its retries) is run again, as a user does after
the error's hint: before its job exists, the same command again (the idempotency keys it stored make the re-run
find the same file and the same job); once the job exists, only the cancel and the follow again (`jobs follow
ID`, the hint a follow failure prints; re-running `train` after the job was cancelled would rightly start a
new job). Each flow has its own key store, its own dataset (unique content) and a recorder for the
transport's retry sleeps, which are not really slept.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reliability.faults_proxy import FlowTag

from backend_support import TINY_TEXT

from synth_ai.client.follow import follow_job
from synth_ai.client.idempotency import IdempotencyStore, fingerprint
from synth_ai.client.resources import SynthAPI, job_id_of
from synth_ai.client.transport import RetryPolicy, Transport
from synth_ai.errors import DeadlineError, InvalidInputError, NetworkError, RateLimitError, ServerError

TRANSIENT = (NetworkError, ServerError, RateLimitError, DeadlineError)
MAX_RUNS = 3  # the first run and up to two re-runs of the same command
TINY_MODEL = TINY_TEXT  # built locally, never downloaded


@dataclass
class Outcome:
    flow: str
    kind: str
    expected: str
    status: str | None = None  # what the flow ended with: a job status, `rejected`, or `error`
    job_id: str | None = None
    file_id: str | None = None
    runs: int = 0
    error: str | None = None
    sleeps: list[float] = field(default_factory=list)  # the transport's retry waits, in order
    transient: list[str] = field(default_factory=list)  # the errors that made the flow run again

    @property
    def ok(self) -> bool:
        return self.status == self.expected


def dataset_for(workdir: Path, flow: str) -> Path:
    path = workdir / f"{flow}.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"{flow}: what is {i} plus {i}?"},
                          {"role": "assistant", "content": f"{2 * i}"}]} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def open_flow_api(api_base: str, key: str, flow: str, sleeps: list[float]) -> SynthAPI:
    transport = Transport(api_base, key, retry=RetryPolicy(), sleep=sleeps.append,
                          http_transport=FlowTag(flow))
    return SynthAPI(transport)


def run_flow(kind: str, flow: str, *, api_base: str, key: str, workdir: Path, config: Path) -> Outcome:
    expected = {"train": "cancelled", "create": "cancelled", "reject": "rejected", "succeed": "succeeded"}[kind]
    outcome = Outcome(flow, kind, expected)
    dataset = dataset_for(workdir, flow)
    store = IdempotencyStore(workdir / f"{flow}.keys.json")
    api = open_flow_api(api_base, key, flow, outcome.sleeps)
    try:
        for _ in range(MAX_RUNS):
            outcome.runs += 1
            try:
                if kind in ("train", "succeed"):
                    _train(api, store, dataset, config, outcome, cancel=kind == "train")
                elif kind == "create":
                    _create_then_cancel(api, store, dataset, outcome)
                else:
                    _rejected_create(api, store, dataset, outcome)
                outcome.error = None
                break
            except TRANSIENT as exc:
                outcome.status, outcome.error = "error", f"{type(exc).__name__}: {exc.message}"
                outcome.transient.append(outcome.error)
            except InvalidInputError as exc:
                outcome.status, outcome.error = "error", f"{type(exc).__name__}: {exc.message}"
                break
    finally:
        api.close()
    return outcome


def _follow_to_end(api: SynthAPI, job_id: str, outcome: Outcome, timeout: float = 120.0) -> None:
    result = follow_job(api.sft, job_id, interval=0.2, timeout=timeout)
    outcome.status = result.status
    if result.succeeded and not result.fine_tuned_model:
        outcome.status = "succeeded without a model"


def _train(api: SynthAPI, store: IdempotencyStore, dataset: Path, config: Path, outcome: Outcome, *,
           cancel: bool) -> None:
    from synth_ai.train.prepare import TrainOptions, prepare_training
    from synth_ai.train.submit import Hooks, submit

    if outcome.job_id is not None:  # an earlier run made the job: resume as the error's hint says
        _cancel_and_follow(api, outcome, cancel=cancel, timeout=120.0 if cancel else 900.0)
        return
    prepared = prepare_training(TrainOptions(configs=[str(config)], dataset=str(dataset),
                                             backend=api.transport.api_base), choose=None)
    submitted = submit(prepared, api, idempotency=None, examples=None, hooks=Hooks(), store=store,
                       sleep=lambda s: time.sleep(min(s, 0.1)))
    outcome.job_id, outcome.file_id = submitted.job_id, submitted.files[0]["id"]
    _cancel_and_follow(api, outcome, cancel=cancel, timeout=120.0 if cancel else 900.0)


def _cancel_and_follow(api: SynthAPI, outcome: Outcome, *, cancel: bool, timeout: float = 120.0) -> None:
    assert outcome.job_id is not None
    if cancel:
        api.sft.cancel(outcome.job_id)
    _follow_to_end(api, outcome.job_id, outcome, timeout=timeout)


def _upload(api: SynthAPI, store: IdempotencyStore, dataset: Path, outcome: Outcome) -> str:
    fp = fingerprint("files.upload", api.transport.api_base, dataset.name)
    doc = api.files.upload(dataset, idempotency_key=store.key_for(fp))
    outcome.file_id = doc["id"]
    return doc["id"]


def _create_then_cancel(api: SynthAPI, store: IdempotencyStore, dataset: Path, outcome: Outcome) -> None:
    if outcome.job_id is None:
        body = sft_body(_upload(api, store, dataset, outcome))
        created = api.sft.create(body, idempotency_key=store.key_for(fingerprint("sft.create", "", body)))
        outcome.job_id = job_id_of(created, "/learning/jobs")
    _cancel_and_follow(api, outcome, cancel=True)


def _rejected_create(api: SynthAPI, store: IdempotencyStore, dataset: Path, outcome: Outcome) -> None:
    body = sft_body(_upload(api, store, dataset, outcome), learning_rate=0)
    try:
        api.sft.create(body, idempotency_key=store.key_for(fingerprint("sft.create", "", body)))
    except InvalidInputError as exc:
        if exc.details.get("status") == 400:
            outcome.status = "rejected"
            return
        raise
    outcome.status = "accepted"


def sft_body(file_id: str, **hyper: Any) -> dict[str, Any]:
    hp: dict[str, Any] = {"n_epochs": 1, "learning_rate": 1e-3, "per_device_batch": 2, "sequence_length": 64, **hyper}
    return {"model": TINY_MODEL, "hyperparameters": hp, "training_type": "sft_offline",
            "training_file_id": file_id}
