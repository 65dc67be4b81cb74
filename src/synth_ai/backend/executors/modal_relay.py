"""The local end of a job the `modal` executor runs: `python -m synth_ai.backend.executors.modal_relay <job_id>`.

The scheduler starts it where it would start a worker, so cancel (SIGTERM + `cancel_requested`), restarts and
attempts work as for any job. It:

1. stages the job's own data dir (a database holding just this job and its files, the files' blobs, the model files
   only this machine has: a tiny base model, a fine-tune of this backend as the base, see `modal_bases`) and puts
   it on the volume under `/<job_id>`;
2. starts the job function (`modal_plan.remote_job`: the backend's job worker) and writes the call id to
   `jobs/<job_id>/remote.json` *before* anything else, so a restarted backend reattaches instead of submitting
   again (one remote run per job);
3. every POLL_S, reads the job's database back from the volume and copies the events and metrics it has not
   copied yet into the backend's database: the job's events, metrics and status routes are the same as for a local
   job, and `synth-ai train` shows them as they come (decision: polling the volume rather than an ingest route, so
   the remote side needs no route to, nor credentials for, a backend that is usually on a laptop);
4. at the end, fetches the final model from the volume into this backend's model store and registers it under the
   same `ft:<base>:<job_id>` id, so inference, eval and the next job use it as if it had trained here.

Stopping: a cancel cancels the remote call; the backend going away (SIGTERM from the scheduler, or the parent
gone) leaves the remote call running and exits EXIT_INTERRUPTED: the next backend start requeues the job and a new
relay reattaches to the same call.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from synth_ai.backend.executors.modal import STATE_FILE
from synth_ai.backend.executors.modal_bases import stage_models
from synth_ai.backend.executors.modal_plan import DEFAULT_TIMEOUT_S, ModalPlan, plan_for
from synth_ai.backend.executors.modal_transport import Transport, transport_for
from synth_ai.backend.executors.placement import job_needs
from synth_ai.backend.executors.remote_needs import job_secrets
from synth_ai.backend.jobs.process_contract import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, PARENT_ENV, die_with_parent
from synth_ai.backend.jobs.worker import StopSignal, _reason
from synth_ai.backend.server_settings import BackendSettings
from synth_ai.backend.store import job_records as J
from synth_ai.backend.store.db import Database, loads, utcnow
from synth_ai.fsutil import atomic_write_text

POLL_ENV = "SYNTH_AI_MODAL_POLL_S"
TIMEOUT_ENV = "SYNTH_AI_MODAL_TIMEOUT_S"  # the Modal function's timeout; Modal's longest (24 h) by default
# Lifecycle events belong to the backend that owns the job; the remote database's copies are not relayed.
LIFECYCLE = (J.EV_CREATED, J.EV_QUEUED, J.EV_WORKER_STARTED, J.EV_COMPLETED, J.EV_FAILED, J.EV_CANCELLED,
             J.EV_CANCEL_REQUESTED, J.EV_REQUEUED, J.EV_INTERRUPTED)

log = logging.getLogger("synth_ai.backend.modal_relay")


class Relay:
    def __init__(self, settings: BackendSettings, store: J.JobStore, job: Any, plan: ModalPlan,
                 transport: Transport) -> None:
        self.settings, self.store, self.job, self.plan, self.transport = settings, store, job, plan, transport
        self.job_id = job["id"]
        self.job_dir = settings.job_dir(self.job_id)
        self.state_path = self.job_dir / STATE_FILE
        self.state: dict[str, Any] = _read_json(self.state_path)

    def save(self) -> None:
        atomic_write_text(self.state_path, json.dumps(self.state, indent=2) + "\n")

    # Submit -------------------------------------------------------------------------------------------------
    def submit_or_reattach(self) -> str:
        if self.state.get("call_id"):
            self.store.add_event(self.job_id, f"{self.job['kind']}.remote.reattached",
                                 f"Reattached to the running Modal call {self.state['call_id']}.",
                                 {"call_id": self.state["call_id"], "gpu": self.plan.gpu}, "info")
            return str(self.state["call_id"])
        bundle = self.job_dir / "bundle"
        shutil.rmtree(bundle, ignore_errors=True)
        stage(self.settings, self.store.db, self.job, bundle)
        self.transport.upload(self.plan, bundle)
        shutil.rmtree(bundle, ignore_errors=True)
        secrets = job_secrets(self.job["kind"], loads(self.job["payload"]) or {}, self.settings.data_dir)
        call_id = self.transport.spawn(self.plan, secrets)
        self.state = {"call_id": call_id, "transport": self.transport.name, "gpu": self.plan.gpu,
                      "nodes": self.plan.nodes, "app": self.plan.app_name, "submitted_at": utcnow(),
                      "relayed_seq": 0, "relayed_metric_rowid": 0}
        self.save()
        self.store.add_event(self.job_id, f"{self.job['kind']}.remote.submitted",
                             f"Submitted to Modal: {self.plan.gpu}"
                             + (f" x {self.plan.nodes} nodes" if self.plan.nodes > 1 else "") + f" (call {call_id}).",
                             {"call_id": call_id, "gpu": self.plan.gpu, "nodes": self.plan.nodes,
                              "ranks": self.plan.world_size, "app": self.plan.app_name, "transport": self.transport.name,
                              "secrets": sorted(secrets)}, "info")  # names only
        return call_id

    # Stream -------------------------------------------------------------------------------------------------
    def snapshot(self) -> sqlite3.Connection | None:
        copy = self.job_dir / "remote-snapshot.sqlite3"
        copy.unlink(missing_ok=True)
        if not self.transport.snapshot_db(self.plan, copy):
            return None
        conn = sqlite3.connect(copy)
        conn.row_factory = sqlite3.Row
        return conn

    def relay_once(self) -> sqlite3.Row | None:
        """Copy what is new; returns the remote job row (None before the remote side has written anything)."""
        conn = self.snapshot()
        if conn is None:
            return None
        try:
            seq = int(self.state.get("relayed_seq", 0))
            for ev in conn.execute("SELECT seq, type, level, message, data FROM events WHERE job_id = ? AND seq > ? "
                                   "ORDER BY seq", (self.job_id, seq)).fetchall():
                if not ev["type"].endswith(LIFECYCLE):
                    self.store.add_event(self.job_id, ev["type"], ev["message"], loads(ev["data"]), ev["level"])
                self.state["relayed_seq"] = ev["seq"]
            rowid = int(self.state.get("relayed_metric_rowid", 0))
            points = conn.execute("SELECT rowid, name, step, value, phase FROM metrics WHERE job_id = ? AND rowid > ? "
                                  "ORDER BY rowid", (self.job_id, rowid)).fetchall()
            if points:
                self.store.add_metrics(self.job_id, [(p["name"], p["step"], p["value"], p["phase"]) for p in points])
                self.state["relayed_metric_rowid"] = points[-1]["rowid"]
            self.save()
            return conn.execute("SELECT * FROM jobs WHERE id = ?", (self.job_id,)).fetchone()
        finally:
            conn.close()

    # Finish -------------------------------------------------------------------------------------------------
    def finish(self, remote: sqlite3.Row | None) -> int:
        status = remote["status"] if remote is not None else None
        if status == "succeeded" and remote["fine_tuned_model"]:
            fine_tuned = str(remote["fine_tuned_model"])
            final_dir = self.job_dir / "work" / "final"
            self.transport.download(self.plan, f"backend/jobs/{self.job_id}/work/final", final_dir)
            from synth_ai.backend.store.model_store import ModelStore

            root_base = fine_tuned.split(":", 2)[1]
            ModelStore(self.settings.data_dir).register_fine_tuned(fine_tuned, root_base, self.job_id, final_dir)
            self.store.transition(self.job_id, "succeeded", only_from={"running"}, fine_tuned_model=fine_tuned,
                                  error=None, event=(J.EV_COMPLETED, f"Job completed: {fine_tuned}",
                                                     {"fine_tuned_model": fine_tuned, "executor": "modal",
                                                      "gpu": self.plan.gpu}, "info"),
                                  message=f"fine-tuned model {fine_tuned}")
            return EXIT_OK
        reason = (remote["error"] if remote is not None and remote["error"] else
                  f"the Modal function ended with the job {status or 'not started'}")
        self.store.transition(self.job_id, "failed", only_from={"running"}, error=reason,
                              event=(J.EV_FAILED, f"Job failed: {reason}",
                                     {"reason": reason, "executor": "modal", "remote_status": status}, "error"),
                              message=reason)
        return EXIT_FAILED


def stage(settings: BackendSettings, db: Database, job: Any, bundle: Path) -> None:
    """The job's own data dir: a database with this job (queued, attempt 1) and its files, their blobs, and the
    model files only this machine has (`modal_bases`; registry models are downloaded by the container)."""
    from synth_ai.backend.store.blobs import BlobStore

    remote = BackendSettings(data_dir=bundle)
    remote.ensure_dirs()
    target = Database(remote.db_path)
    target.migrate()
    local_blobs = BlobStore(settings.blobs_dir, settings.tmp_dir)
    files = db.conn().execute("SELECT f.*, jf.role FROM job_files jf JOIN files f ON f.id = jf.file_id "
                              "WHERE jf.job_id = ?", (job["id"],)).fetchall()
    with target.tx() as conn:
        cols = [k for k in job.keys()]
        row = {**dict(zip(cols, tuple(job))), "status": "queued", "attempts": 1, "worker_pid": None,
               "cancel_requested": 0, "started_at": None, "finished_at": None}
        conn.execute(f"INSERT INTO jobs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                     [row[c] for c in cols])
        for f in files:
            names = [k for k in f.keys() if k != "role"]
            conn.execute(f"INSERT OR IGNORE INTO files ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                         [f[k] for k in names])
            conn.execute("INSERT INTO job_files (job_id, file_id, role) VALUES (?, ?, ?)", (job["id"], f["id"],
                                                                                          f["role"]))
            dest = BlobStore(remote.blobs_dir, remote.tmp_dir).path_for(f["sha256"])
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local_blobs.path_for(f["sha256"]), dest)
    stage_models(settings.data_dir, str(job["model"]), bundle)


def run(job_id: str) -> int:
    settings = BackendSettings.load()
    store = J.JobStore(Database(settings.db_path))
    job = store.get(job_id)
    if job is None or job["status"] in J.TERMINAL:
        return EXIT_OK if job is not None else EXIT_FAILED
    parent = int(os.environ[PARENT_ENV]) if os.environ.get(PARENT_ENV, "").isdigit() else None
    stop = StopSignal(store, job_id, parent)
    signal.signal(signal.SIGTERM, lambda *_: stop.terminated.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    kind = job["kind"]
    if not store.transition(job_id, "running", only_from={"queued", "running"}, worker_pid=os.getpid(),
                            started_at=job["started_at"] or utcnow(),
                            event=(J.EV_WORKER_STARTED, f"Relay started for Modal (attempt {job['attempts']}, "
                                                        f"pid {os.getpid()})",
                                   {"attempt": job["attempts"], "executor": "modal", "pid": os.getpid()}, "info"),
                            message="modal relay started"):
        return EXIT_OK
    try:
        payload = loads(job["payload"]) or {}
        relay = Relay(settings, store, job, plan_for(job_id, job_needs(kind, job["model"], payload),
                                                      timeout_s=function_timeout_s()), transport_for())
        call_id = relay.submit_or_reattach()
    except Exception as exc:  # noqa: BLE001 - every failure to submit becomes the job's reason
        reason = f"could not submit the job to Modal: {_reason(exc)}"
        store.transition(job_id, "failed", only_from={"running"}, error=reason,
                         event=(J.EV_FAILED, f"Job failed: {reason}", {"reason": reason}, "error"), message=reason)
        return EXIT_FAILED
    poll = float(os.environ.get(POLL_ENV, "") or 2.0)
    deadline = time.monotonic() + relay.plan.timeout_s + min(600, relay.plan.timeout_s)  # Modal stops it first
    while True:
        remote = relay.relay_once()
        if relay.transport.done(call_id):
            return relay.finish(relay.relay_once() or remote)
        # a cancel arrives as cancel_requested and SIGTERM together: read the database before taking SIGTERM
        # for the backend going away
        leaving = stop.terminated.is_set() or stop.parent_gone()
        if stop.cancelled(fresh=leaving) or time.monotonic() > deadline:
            relay.transport.cancel(call_id)
            relay.relay_once()
            if stop.cancelled(fresh=True):
                store.transition(job_id, "cancelled", only_from={"queued", "running"},
                                 event=(J.EV_CANCELLED, "Job cancelled; the Modal call was cancelled.",
                                        {"call_id": call_id}, "warning"), message="cancelled by request")
                return EXIT_OK
            reason = f"the Modal call ran past the job's timeout ({relay.plan.timeout_s} s)"
            store.transition(job_id, "failed", only_from={"running"}, error=reason,
                             event=(J.EV_FAILED, f"Job failed: {reason}", {"reason": reason}, "error"), message=reason)
            return EXIT_FAILED
        if leaving:
            store.add_event(job_id, f"{kind}.{J.EV_INTERRUPTED}",
                            f"Relay stopped because {stop.why()}; the Modal call keeps running and the backend "
                            "reattaches to it when it starts again.", {"call_id": call_id}, "warning")
            return EXIT_INTERRUPTED
        time.sleep(poll)


def function_timeout_s() -> int:
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    return min(int(raw), DEFAULT_TIMEOUT_S) if raw.isdigit() and int(raw) > 0 else DEFAULT_TIMEOUT_S


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m synth_ai.backend.executors.modal_relay <job_id>", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(args[0])


if __name__ == "__main__":
    sys.exit(main())
