"""Job ids and the kind each names: the embedded backend makes ids `<prefix>_<hex>`, one prefix per job kind.

Shared data below client and backend: the backend's kinds registry (`backend/jobs/kinds.py`) takes its `id_prefix`
values from here, and the client reads the kind of an id from them without importing the backend.
"""

from __future__ import annotations

# Kind name -> the prefix of its job ids. A hosted backend's ids have other shapes; nothing here assumes they match.
ID_PREFIXES: dict[str, str] = {
    "sft": "job",
    "rl": "rljob",
    "tinker": "tinkerjob",
}


def kind_of_job_id(job_id: str) -> str | None:
    """The kind a job id names by its prefix (`job_…` sft, `rljob_…` rl); None for an id of another shape."""
    return next((kind for kind, prefix in ID_PREFIXES.items() if job_id.startswith(f"{prefix}_")), None)
