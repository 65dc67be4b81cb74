"""A SLURM batch script that trains one config on your own cluster (`synth-ai backend slurm --config …`).

Rendered from the config's `[compute]` (`nodes`, `gpu_count`; `gpu_type` is named in a comment, since sites spell
GPU types differently): the allocation is `nodes` nodes with one task and `gpu_count` GPUs each. Each node runs
`synth-ai backend serve --executor torchrun` with its node rank from SLURM (`SLURM_NODEID`) and node 0's host name
as the rendezvous (the multi-node torchrun executor, `torchrun_command` and `node_follower`); node 0 (the batch
host, where the script runs) serves the API on its loopback, and the script trains the config against it with
`synth-ai train`, then stops the backends. The data dir must be on a filesystem every node shares; the job, its
checkpoints and the trained model stay there.

Pure text: nothing here runs SLURM (there is none on the machines this was written on).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.backend.executors.torchrun_command import (
    DEFAULT_MASTER_PORT,
    MASTER_ADDR_ENV,
    MASTER_PORT_ENV,
    NNODES_ENV,
    NODE_RANK_ENV,
)
from synth_ai.config.toml_source import TomlSource
from synth_ai.errors import ConfigError, InvalidInputError

TIME_FORMAT = re.compile(r"^(?:(\d+)-)?(\d{1,3}):(\d{2}):(\d{2})$")  # SLURM's [days-]hours:minutes:seconds
DEFAULT_TIME = "24:00:00"
DEFAULT_API_PORT = 8000


@dataclass(frozen=True)
class SlurmRequest:
    config: Path
    data_dir: Path
    nodes: int = 1
    gpu_count: int = 1
    gpu_type: str | None = None
    time: str = DEFAULT_TIME
    partition: str | None = None
    api_port: int = DEFAULT_API_PORT
    master_port: int = DEFAULT_MASTER_PORT

    @property
    def seconds(self) -> int:
        match = TIME_FORMAT.match(self.time)
        if match is None:
            raise InvalidInputError(f"--time {self.time!r} is not a SLURM time limit.",
                                    hint="Write it as hours:minutes:seconds or days-hours:minutes:seconds, "
                                         "e.g. 24:00:00 or 2-00:00:00.")
        days, hours, minutes, secs = (int(g or 0) for g in match.groups())
        return ((days * 24 + hours) * 60 + minutes) * 60 + secs


def request_from_config(source: TomlSource, data_dir: Path, **options: Any) -> SlurmRequest:
    """The request for a training config's `[compute]`; a count that is not a positive whole number is a
    ConfigError naming the file, line and key."""
    table = source.data.get("compute")
    table = table if isinstance(table, dict) else {}
    counts: dict[str, int] = {}
    for key in ("nodes", "gpu_count"):
        value = table.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError([source.issue(("compute", key), "expected a whole number of at least 1", found=value,
                                            has_found=True, fix=f"set [compute].{key} to what one run takes")],
                              file=source.display)
        counts[key] = value
    gpu_type = table.get("gpu_type") if isinstance(table.get("gpu_type"), str) else None
    return SlurmRequest(config=source.path.resolve(), data_dir=data_dir.resolve(), gpu_type=gpu_type, **counts,
                        **options)


def render(request: SlurmRequest) -> str:
    q = shlex.quote
    seconds = request.seconds  # checks --time before anything is written
    gpus = f"{request.gpu_count} GPU{'s' if request.gpu_count > 1 else ''}"
    gpu_type = (f"# [compute].gpu_type = {request.gpu_type}: add your site's GPU type or constraint if it needs one.\n"
                if request.gpu_type else "")
    partition = f"#SBATCH --partition={request.partition}\n" if request.partition else ""
    return f"""#!/bin/bash
# Rendered by `synth-ai backend slurm --config {request.config}` from its [compute]:
# {request.nodes} node(s), {gpus} each. Submit it with `sbatch <this file>` from a shell where `synth-ai` runs
# (the same environment on every node).
{gpu_type}# Every node runs `synth-ai backend serve --executor torchrun` with its node rank: node 0 (the batch host)
# serves the API and launches the job's ranks on all nodes (torchrun, rendezvous at node 0); the others join them.
# SYNTH_AI_HOME must be on a filesystem every node shares; the job and its model stay there
# (`SYNTH_AI_HOME=... synth-ai backend serve` anywhere shows them).
#SBATCH --job-name=synth-ai-{request.config.stem}
#SBATCH --nodes={request.nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={request.gpu_count}
#SBATCH --time={request.time}
{partition}#SBATCH --output=synth-ai-%j.out
set -euo pipefail

export SYNTH_AI_HOME={q(str(request.data_dir))}
export SYNTH_AI_BACKEND_PORT={request.api_port}
export SYNTH_AI_BACKEND_EXECUTOR=torchrun
export SYNTH_AI_BACKEND_WARM_WORKER=0
export {NNODES_ENV}="$SLURM_JOB_NUM_NODES"
export {MASTER_ADDR_ENV}="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export {MASTER_PORT_ENV}={request.master_port}

# one backend per node, its node rank from SLURM
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 \\
    bash -c '{NODE_RANK_ENV}="$SLURM_NODEID" exec synth-ai backend serve' &
BACKENDS=$!
trap 'kill "$BACKENDS" 2>/dev/null || true; wait "$BACKENDS" 2>/dev/null || true' EXIT

until synth-ai backend status >/dev/null 2>&1; do  # node 0's API answers
    kill -0 "$BACKENDS" 2>/dev/null || {{ echo "the backends exited before node 0 answered" >&2; exit 1; }}
    sleep 5
done
synth-ai train --config {q(str(request.config))} --poll-timeout {seconds} --stream-format cli
"""
