"""What a job run on Modal needs from this backend beyond its data dir: the secrets it calls others with, and a
task app it can reach.

- Secrets: what its kind's `remote_secrets` hook names (an RL job presents the task app's ENVIRONMENT_API_KEY,
  and a `[judge]` job its provider's key). This backend knows them (its environment, `env_keys.json`, a key sent
  with the job); the container does not. They go along as an ephemeral Modal secret made at submit
  (`modal.Secret.from_dict`), by value, never written to the volume, the job's payload or its events (those name
  the variables only).
- Reach: a container on Modal cannot call a task app on this machine's loopback or private network, so a job
  whose spec has such a `task_url` (RL's) and would go to Modal is refused at create time rather than failing every
  rollout.

The emulated transport (SYNTH_AI_MODAL_EMULATE) runs the container here, so loopback is reachable there; it starts
the job with `container_environ`, this process's environment without its secrets, so that only what this module
passes reaches the job, as on Modal.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from synth_ai.backend.jobs.kinds import find_kind
from synth_ai.env.secrets import is_secret_name


def job_secrets(kind: str, payload: dict[str, Any], data_dir: Any,
                environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables (name -> value) the job needs inside its container: its kind's `remote_secrets`."""
    job = find_kind(kind)
    return job.secrets_for(job.spec_of(payload), data_dir, environ) if job is not None else {}


def container_environ(secrets: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment an emulated container starts with: this one without any secret, plus the job's own."""
    env = os.environ if environ is None else environ
    return {**{k: v for k, v in env.items() if not is_secret_name(k)}, **secrets}


def unreachable_reason(task_url: str) -> str | None:
    """Why a Modal container could not call `task_url` (None when it could, as far as the address tells)."""
    host = (urlsplit(task_url).hostname or "").strip("[]").lower()
    if host in {"localhost", ""} or host.endswith(".localhost") or host.endswith(".local"):
        return f"{host or 'no host'} names this machine or its local network"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None  # a DNS name: assume public (a tunnel, a Modal web endpoint)
    if address.is_loopback or address.is_unspecified:
        return f"{host} is this machine's loopback address"
    if address.is_private or address.is_link_local:
        return f"{host} is a private-network address"
    return None
