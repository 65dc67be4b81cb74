"""Keys a config may set for synth-ai 0.2.17 (its schema has them, or its product pages use them) that the embedded
backend does not read: accepted, so one file serves both clients, and named in a note so that nobody expects them to
change a local run. A hosted backend may read them; they are sent as written.

Required keys of 0.2.17's schema that the embedded backend ignores (`[rollout].episodes_per_batch`) get no note:
every file must have them. docs/configs.md lists both.
"""

from __future__ import annotations

from typing import Any

from synth_ai.config.diagnostics import Findings, KeyPath

_BATCH = "each iteration runs [training].batch_size seeds x group_size rollouts"
_SYNC = "the trainer's weights reach the rollout engine in memory every weight_sync_interval iterations"
_REFERENCE = "[reference].placement decides whether a reference model is kept"
_SAMPLING = "rollouts sample with [rollout.policy_config]"

UNUSED: dict[str, dict[KeyPath, str]] = {
    "rl": {
        ("rollout", "batches_per_step"): _BATCH,
        ("training", "weight_sync", "direct"): _SYNC,
        ("training", "weight_sync", "verify_every_k"): _SYNC,
        ("topology", "reference_placement"): _REFERENCE,
        ("compute", "topology", "reference_placement"): _REFERENCE,
        ("policy", "repetition_penalty"): _SAMPLING,
        ("policy", "stop_sequences"): _SAMPLING,
        ("judge", "options", "rubric_id"): "the judge scores with [judge.rubric] and rubric_overrides",
        ("judge", "options", "tracks"): "the judge scores the event and outcome tracks [judge.options] enables",
        ("data",): "each iteration takes new seeds from its number (page 003 of the product docs sets [data].seeds)",
    },
    "sft": {
        ("hyperparameters", "parallelism", "fp16"): "the trainer uses bf16 (bf16 = true) or float32",
        ("hyperparameters", "parallelism", "pipeline_parallel_size"): "the model is sharded with FSDP or DeepSpeed "
                                                                      "instead",
    },
}


def note_unused_keys(findings: Findings, kind: str, data: dict[str, Any]) -> None:
    """A note for each key of `UNUSED[kind]` the file sets."""
    for path, instead in UNUSED.get(kind, {}).items():
        if _value_at(data, path) is not None:
            findings.note(path, f"kept for synth-ai 0.2.17 configs; the embedded backend does not use it: {instead}")


def _value_at(data: Any, path: KeyPath) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data
