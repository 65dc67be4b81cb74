"""The nodes other than 0 of a multi-node `torchrun` backend (your own cluster).

Node 0 runs `synth-ai backend serve --executor torchrun --nnodes N --node-rank 0 --master-addr <node 0's address>`:
the API, the scheduler, and for each job a torchrun launcher with `--nnodes N --node-rank 0`. Its executor records
each such launch in the job's folder before the launcher starts (`nodes.json`, `torchrun_command.record_launch`:
the attempt, the node count, the rendezvous address and port).

Every other node runs the same command with its own `--node-rank k` and the same data dir (a filesystem all nodes
share: the ranks read the job, its files and its checkpoints from it). It serves no API and schedules nothing:
`NodeFollower` reads the data dir every POLL_S and, for each launch it has not joined while the job is still at that
attempt and not finished, starts the same torchrun command with its own node rank. torchrun's rendezvous at node 0
then starts the job's ranks on every node together; global rank 0 claims and reports (jobs/worker.py), the ranks
here train their share and write nothing. A cancel or a failure reaches them through the process group.

One multi-node job runs at a time (every launch uses the one rendezvous port), which is the backend's default
(`SYNTH_AI_BACKEND_MAX_JOBS=1`).
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import threading
from typing import Any

from synth_ai.backend.executors.torchrun import training_ranks
from synth_ai.backend.executors.torchrun_command import NodePlace, rank_env, read_launch, torchrun_argv
from synth_ai.backend.jobs.process_contract import PARENT_ENV
from synth_ai.backend.server_settings import BackendSettings
from synth_ai.backend.store.db import Database

POLL_S = 0.5

log = logging.getLogger("synth_ai.backend.node_follower")


class NodeFollower:
    """Node k > 0: joins every multi-node launch of node 0, each with one torchrun launcher of its own."""

    def __init__(self, settings: BackendSettings, node_rank: int) -> None:
        self.settings, self.node_rank = settings, node_rank
        self.db = Database(settings.db_path)
        self.joined: set[tuple[str, int]] = set()
        self.running: dict[str, subprocess.Popen] = {}
        self.stop = threading.Event()

    def poll_once(self) -> None:
        for job_id, proc in list(self.running.items()):
            if proc.poll() is not None:
                log.info("node %s: job %s's ranks here exited %s", self.node_rank, job_id, proc.returncode)
                del self.running[job_id]
        try:
            rows = self.db.conn().execute(
                "SELECT * FROM jobs WHERE status IN ('queued', 'running') AND worker_pid IS NOT NULL").fetchall()
        except sqlite3.OperationalError as exc:  # node 0 has not made the database yet (all nodes start at once)
            log.debug("node %s: no jobs to read yet (%s)", self.node_rank, exc)
            return
        for row in rows:
            launch = read_launch(self.settings.job_dir(row["id"]))
            key = (row["id"], int(row["attempts"]))
            if launch is None or launch.get("attempt") != row["attempts"] or key in self.joined:
                continue
            if row["id"] in self.running:  # a previous attempt's ranks are still leaving
                continue
            self.joined.add(key)
            self.running[row["id"]] = self._start(row, launch)

    def _start(self, row: Any, launch: dict[str, Any]) -> subprocess.Popen:
        place = NodePlace(nodes=int(launch["nodes"]), node_rank=self.node_rank, master_addr=str(launch["master_addr"]),
                          master_port=int(launch["master_port"])).checked()
        job_dir = self.settings.job_dir(row["id"])
        env = {**os.environ, **rank_env(), "SYNTH_AI_HOME": str(self.settings.data_dir), PARENT_ENV: str(os.getpid()),
               "PYTHONUNBUFFERED": "1"}
        log.info("node %s: joining job %s (attempt %s)", self.node_rank, row["id"], row["attempts"])
        with open(job_dir / f"worker-node{self.node_rank}.log", "ab") as log_file:
            return subprocess.Popen(torchrun_argv(row["id"], training_ranks(row), place), env=env, cwd=str(job_dir),
                                    stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)

    def serve(self) -> None:
        """Until SIGTERM or Ctrl-C; the ranks started here are stopped on the way out (they keep nothing)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop.set())
        try:
            while not self.stop.is_set():
                self.poll_once()
                self.stop.wait(POLL_S)
        finally:
            for proc in self.running.values():
                proc.send_signal(signal.SIGTERM)
            for proc in self.running.values():
                try:
                    proc.wait(timeout=self.settings.cancel_grace_s or 1)
                except subprocess.TimeoutExpired:
                    proc.kill()
