"""The keys an RL job calls others with: the task app's ENVIRONMENT_API_KEY (one sent with the job first, then the
backend's known keys) and the judge provider's key. The worker picks the task app's key from these candidates;
a job run on Modal gets them as an ephemeral secret (`JobKind.remote_secrets`, see executors/remote_needs.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from synth_ai.config.job_specs import RLJobSpec


def environment_key_candidates(spec: RLJobSpec | Mapping[str, Any], data_dir: Path | None) -> list[str]:
    """Keys to send the task app in X-API-Key: one given with the job first, then the backend's known keys
    (`synth_ai.env.backend_keys.environment_keys`)."""
    from synth_ai.env.backend_keys import environment_keys

    found = RLJobSpec.of(spec).given_environment_keys
    for key in environment_keys(data_dir):
        if key not in found:
            found.append(key)
    return found


def job_secrets(spec: RLJobSpec | Mapping[str, Any], data_dir: Path | None,
                environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables (name -> value) an RL job needs where it runs remotely."""
    from synth_ai.backend.trainers.rl.judge import resolve_judge
    from synth_ai.backend.trainers.rl.rollouts import pick_environment_key

    spec = RLJobSpec.of(spec)
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    if spec.task_url:
        # the key the task app accepts now (refusing every key raises: the job could not roll out anyway)
        key = pick_environment_key(spec.task_url, environment_key_candidates(spec, data_dir))
        if key:
            out["ENVIRONMENT_API_KEY"] = key
    judge = resolve_judge(spec.config)
    if judge is not None and (env.get(judge.key_env) or "").strip():  # also used, when set, with an overridden URL
        out[judge.key_env] = env[judge.key_env].strip()
    return out
