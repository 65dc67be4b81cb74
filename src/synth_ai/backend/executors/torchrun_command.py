"""The torchrun command line of a job's ranks, on one machine or across nodes: what the `torchrun` executor starts
here, what a Modal container starts (`modal_container`), and what a SLURM script runs on each node (`slurm`).
Pure: no torch import (the API process builds it).

One node: `--standalone`. Several: a static rendezvous at node 0 (`--nnodes --node-rank --master-addr
--master-port`); every node runs the same command with its own node rank, and torchrun numbers node k's ranks
k x nproc .. k x nproc + nproc - 1. Global rank 0 (on node 0) alone claims the job and reports it; the others train
their share (`jobs/worker.py`).

Where a node's place comes from: `backend serve --nnodes/--node-rank/--master-addr/--master-port`, which set the
environment variables below (`NodePlace.from_env`), or Modal's cluster info (`modal_container`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.backend.executors.process_executor import TORCHRUN_MODULE
from synth_ai.backend.jobs.process_contract import WORKER_MODULE
from synth_ai.errors import InvalidInputError
from synth_ai.fsutil import atomic_write_text

NNODES_ENV = "SYNTH_AI_BACKEND_TORCHRUN_NNODES"
NODE_RANK_ENV = "SYNTH_AI_BACKEND_TORCHRUN_NODE_RANK"
MASTER_ADDR_ENV = "SYNTH_AI_BACKEND_TORCHRUN_MASTER_ADDR"
MASTER_PORT_ENV = "SYNTH_AI_BACKEND_TORCHRUN_MASTER_PORT"
DEFAULT_MASTER_PORT = 29500  # torchrun's own default
LAUNCH_FILE = "nodes.json"  # in a job's folder: node 0's multi-node launch, which the other nodes join


@dataclass(frozen=True)
class NodePlace:
    """This node's place in a job's ranks: how many nodes, which one this is, and where node 0 listens."""

    nodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_MASTER_PORT

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    def ranks(self, nproc: int) -> range:
        """The global ranks torchrun gives this node's `nproc` processes."""
        return range(self.node_rank * nproc, self.node_rank * nproc + nproc)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> NodePlace:
        env = os.environ if environ is None else environ
        place = cls(nodes=_int(env, NNODES_ENV, 1, 1), node_rank=_int(env, NODE_RANK_ENV, 0, 0),
                    master_addr=env.get(MASTER_ADDR_ENV, "").strip() or "127.0.0.1",
                    master_port=_int(env, MASTER_PORT_ENV, DEFAULT_MASTER_PORT, 1))
        return place.checked()

    @classmethod
    def from_flags(cls, nodes: int | None, node_rank: int | None, master_addr: str | None,
                   master_port: int | None) -> NodePlace:
        """`backend serve`'s flags over the environment; exported to the environment, where the executor and the
        processes it starts read them."""
        given = {NNODES_ENV: nodes, NODE_RANK_ENV: node_rank, MASTER_ADDR_ENV: master_addr,
                 MASTER_PORT_ENV: master_port}
        env = {**os.environ, **{k: str(v) for k, v in given.items() if v is not None}}
        place = cls.from_env(env)
        if place.multi_node or any(v is not None for v in given.values()):
            os.environ.update(place.env())
        return place

    def checked(self) -> NodePlace:
        if self.node_rank >= self.nodes:
            raise InvalidInputError(
                f"Node rank {self.node_rank} is not below the node count {self.nodes} ({NODE_RANK_ENV}, "
                f"{NNODES_ENV}; `backend serve --node-rank/--nnodes`).",
                hint=f"Number the nodes 0 .. {self.nodes - 1}; node 0 serves the API.")
        if not 0 < self.master_port < 65536:
            raise InvalidInputError(f"{MASTER_PORT_ENV}={self.master_port} is not a port (1-65535).",
                                    hint="Give `--master-port` a free port on node 0.")
        return self

    def env(self) -> dict[str, str]:
        """The variables that carry this place to a process started later (the torchrun executor reads them)."""
        return {NNODES_ENV: str(self.nodes), NODE_RANK_ENV: str(self.node_rank), MASTER_ADDR_ENV: self.master_addr,
                MASTER_PORT_ENV: str(self.master_port)}


def torchrun_argv(job_id: str, nproc: int, place: NodePlace | None = None) -> list[str]:
    """`python -m torch.distributed.run … -m synth_ai.backend.jobs.worker <job_id>` for `nproc` ranks on this node."""
    place = place or NodePlace()
    if place.multi_node:
        where = [f"--nnodes={place.nodes}", f"--node-rank={place.node_rank}",
                 f"--master-addr={place.master_addr}", f"--master-port={place.master_port}"]
    else:
        where = ["--standalone"]
    return [sys.executable, "-m", TORCHRUN_MODULE, *where, f"--nproc-per-node={nproc}", "-m", WORKER_MODULE, job_id]


def record_launch(job_dir: Path, attempt: int, place: NodePlace) -> None:
    """Node 0: what the other nodes need to join this attempt of the job (`node_follower`)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    doc = {"attempt": attempt, "nodes": place.nodes, "master_addr": place.master_addr,
           "master_port": place.master_port}
    atomic_write_text(job_dir / LAUNCH_FILE, json.dumps(doc, indent=2) + "\n")


def read_launch(job_dir: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((job_dir / LAUNCH_FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def rank_env() -> dict[str, str]:
    """One CPU thread per rank unless told otherwise: N ranks share the machine's cores."""
    return {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def _int(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < minimum:
        raise InvalidInputError(f"{name}={raw!r} is not a whole number of at least {minimum}.",
                                hint=f"Set {name} to a whole number >= {minimum}, or unset it.")
    return int(raw)
