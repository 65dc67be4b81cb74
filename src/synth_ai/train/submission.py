"""What the SFT and RL step runners share: how they talk to the person (`Hooks`), what a submission returns
(`Submitted`), and creating a job with an idempotency key that a re-run of the same command finds again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from synth_ai.client.idempotency import IdempotencyStore, fingerprint
from synth_ai.client.resources import Jobs, job_id_of
from synth_ai.errors import NotFoundError

RESTARTABLE = {"failed", "cancelled", "canceled", "gone"}  # an earlier job in these does not block a new one


@dataclass
class Submitted:
    kind: str
    job_id: str
    api_base: str
    job: dict[str, Any] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    fingerprints: list[str] = field(default_factory=list)  # idempotency entries to forget once the job ends
    steps: list[str] = field(default_factory=list)  # the names of the plan's steps, in the order they ran


@dataclass
class Hooks:
    """How the flow talks to the person running it (the CLI passes its output sink)."""

    say: Callable[[str], None] = lambda _m: None
    warn: Callable[[str], None] = lambda _m: None
    upload_progress: Callable[[str, int, int], None] | None = None  # (label, sent, total)
    # Called once the local checks passed, before the first request (the CLI asks whether the backend can train).
    preflight: Callable[[], None] = lambda: None


@dataclass
class CreatedJob:
    job_id: str
    doc: dict[str, Any]
    fingerprint: str
    earlier: bool = False  # the job an earlier run of the same command made (its idempotency key was kept)


def create_job(jobs: Jobs, operation: str, payload: dict[str, Any], *, idempotency: str | None,
               store: IdempotencyStore, hooks: Hooks) -> CreatedJob:
    """`POST` the job with the key remembered for this payload (or `--idempotency`), and say whether it is new."""
    url = jobs.t.url(jobs.prefix)
    create_fp = fingerprint(operation, jobs.t.api_base, payload)
    hooks.say(f"Creating the job: POST {url}")
    with store.operation(create_fp):  # an identical command started meanwhile waits, then finds this job
        earlier = idempotency is None and _earlier_job_in_play(jobs, store, create_fp, hooks)
        created = jobs.create(payload, idempotency_key=store.key_for(create_fp, explicit=idempotency))
        job_id = job_id_of(created, url)
        store.remember(create_fp, job_id)
    _say_created(hooks, job_id, created, earlier)
    return CreatedJob(job_id, created if isinstance(created, dict) else {}, create_fp, earlier)


def _earlier_job_in_play(jobs: Jobs, store: IdempotencyStore, create_fp: str, hooks: Hooks) -> bool:
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
