"""The job function inside a Modal container: `remote_job`, the body of the function `modal_plan.build_app` makes
(also run here by Modal's `.local()` and by the emulated transport, `modal_transport`).

Every GPU is used: the job's ranks on this container are those the `torchrun` executor would start on a machine
with this container's GPUs (`torchrun.training_ranks`: `[compute].gpu_count`, at most the GPUs present); with more
than one, the job worker runs under torchrun here (`torchrun_command`), else in this process as before.

`nodes > 1` (a clustered function, `modal.clustered(size=nodes)`): Modal starts one container per node and calls
the function in each. Each reads its place from Modal's cluster info (`modal.experimental.get_cluster_info()`:
its rank, the containers' addresses in rank order) and starts torchrun with `--nnodes/--node-rank` and node 0 as
the rendezvous (`place_from_cluster`). One job, nodes x gpu_count ranks, one claim: global rank 0 (on node 0)
claims the job and reports it; the other ranks learn through the process group that it did (`jobs/worker.py`).

A volume is not shared live between containers (each sees what was committed when it started, and what it
commits wins over what another committed: last writer wins), so only node 0 writes the job's data dir and
commits it. The other nodes work in a private copy (`node_copy`): their own copy of the database, links to
everything else (files, models, checkpoints), and they never commit. They download a registry model into the
Hugging Face cache on the volume themselves (node 0's download is not visible to them); the files are the same.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from synth_ai.backend.executors.torchrun_command import DEFAULT_MASTER_PORT, NodePlace, rank_env, torchrun_argv

VOLUME_NAME = "synth-ai-jobs"
DB_NAME = "backend.sqlite3"


def place_from_cluster(info: Any, port: int = DEFAULT_MASTER_PORT) -> NodePlace:
    """A node's place from Modal's cluster info (`rank`, `container_ips` in rank order; IPv4 ones when given)."""
    addresses = list(getattr(info, "container_ipv4_ips", None) or info.container_ips)
    return NodePlace(nodes=len(addresses), node_rank=int(info.rank), master_addr=addresses[0],
                     master_port=port).checked()


def cluster_place() -> NodePlace:
    """This container's place: Modal's cluster info inside a clustered function, one node anywhere else."""
    try:
        import modal.experimental

        info = modal.experimental.get_cluster_info()
    except Exception:  # noqa: BLE001 - not in a cluster (one container, `.local()`, the emulated transport)
        return NodePlace()
    # the rendezvous port: torchrun's default unless SYNTH_AI_BACKEND_TORCHRUN_MASTER_PORT says otherwise
    return place_from_cluster(info, NodePlace.from_env().master_port) if info.container_ips else NodePlace()


def node_copy(data_dir: Path, into: Path) -> Path:
    """A private data dir for a node other than 0: folders made, files linked, the database copied."""
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(data_dir, into, copy_function=os.symlink,
                    ignore=lambda _dir, names: [n for n in names if n.startswith(DB_NAME)])
    source = data_dir / "backend" / DB_NAME
    if source.is_file():
        copy_database(source, into / "backend" / DB_NAME)
    return into


def copy_database(source: Path, dest: Path) -> None:
    """A consistent copy of a SQLite database, while another process may be writing it."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    try:
        out = sqlite3.connect(dest)
        src.backup(out)
        out.close()
    finally:
        src.close()


class _VolumeCommitter:
    """In a Modal container: make the job's database visible to the relay every few seconds (a volume shows
    other readers only what was committed; the WAL is folded into the database file first)."""

    def __init__(self, db_path: Any, every_s: float = 5.0) -> None:
        import threading

        self.db_path, self.every_s = db_path, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def commit(self) -> None:
        import modal

        conn = sqlite3.connect(self.db_path, timeout=30)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        modal.Volume.from_name(VOLUME_NAME).commit()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.commit()
            except Exception:  # noqa: BLE001 - the next round tries again
                pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every_s + 5)
        self.commit()


def _fetch_base_model(model: str) -> None:
    """A registry model into the Hugging Face cache on the volume (HF_HOME), once; the trainer then loads it as
    it does offline. Tiny models are built, fine-tunes and folders are not downloads."""
    from synth_ai.models.registry import find_model

    info = find_model(model)
    if info is None or info.is_local:
        return
    from huggingface_hub import snapshot_download

    snapshot_download(info.id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja",
                                                "tokenizer*"])


def run_ranks(job_id: str, job: Any, place: NodePlace) -> int:
    """The job worker on this container: in this process for one rank, else torchrun over this node's ranks.
    SIGTERM (the platform stopping the container, a cancel) goes on to torchrun, which passes it to its ranks."""
    from synth_ai.backend.executors.torchrun import training_ranks
    from synth_ai.backend.jobs.worker import run

    nproc = training_ranks(job) if job is not None else 1  # no job: the worker says so and fails, as on Modal
    if nproc == 1 and not place.multi_node:
        return run(job_id)
    proc = subprocess.Popen(torchrun_argv(job_id, nproc, place), env={**os.environ, **rank_env()})
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)


def remote_job(job_id: str, data_dir: str) -> dict[str, Any]:
    """The job function on Modal (or here, through `.local()`): the backend's job worker on the job's data dir."""
    place = cluster_place()
    in_modal = bool(os.environ.get("MODAL_TASK_ID"))
    home = Path(data_dir)
    if place.node_rank > 0:  # never write the volume's copy: node 0 owns it
        home = node_copy(home, Path(tempfile.gettempdir()) / "synth-ai-node" / job_id)
    os.environ["SYNTH_AI_HOME"] = str(home)
    os.environ["SYNTH_AI_BACKEND_EXECUTOR"] = "local"  # the job runs right here, whatever the submitting backend uses
    from synth_ai.backend.executors.modal_bases import register_staged
    from synth_ai.backend.jobs.kinds import find_kind
    from synth_ai.backend.server_settings import BackendSettings
    from synth_ai.backend.store.db import Database

    settings = BackendSettings.load()
    settings.ensure_dirs()
    db = Database(settings.db_path)
    db.migrate()  # the job's data dir arrives with its database; a fresh one gets the schema
    roots = register_staged(settings.data_dir)  # a fine-tune of the backend, uploaded with the job
    job = db.conn().execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if job is not None and in_modal:
        for model in {str(job["model"]), *roots}:
            _fetch_base_model(model)
        kind = find_kind(str(job["kind"]))
        if kind is not None:  # e.g. RL: the task app is not in this container, so its policy goes through a tunnel
            kind.prepare_remote()
    committer = _VolumeCommitter(settings.db_path) if in_modal and place.node_rank == 0 else None
    try:
        code = run_ranks(job_id, job, place)
    finally:
        if committer is not None:
            committer.close()
    row = db.conn().execute(
        "SELECT status, fine_tuned_model, error FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return {"exit_code": code, "status": row["status"] if row else None,
            "fine_tuned_model": row["fine_tuned_model"] if row else None, "error": row["error"] if row else None,
            "node_rank": place.node_rank}

