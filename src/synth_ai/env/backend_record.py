"""Where the embedded backend of a data dir runs: `<data dir>/backend/backend.json`, which the backend writes once
it listens and removes when it stops.

The port is not always the default one (a backend that found it taken listens on a free port), so every client
asks this record first: the URL in it is the backend of this data dir, whatever listens on the default port.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from synth_ai.processes import pid_alive

RECORD_FILE = ("backend", "backend.json")


def record_path(data_dir: Path) -> Path:
    return Path(data_dir).joinpath(*RECORD_FILE)


def read_record(data_dir: Path) -> dict[str, Any] | None:
    """The record as the backend wrote it (`{pid, host, port, url, api_base, ...}`), or None when there is none."""
    try:
        doc = json.loads(record_path(data_dir).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("pid"), int) else None


def running_record(data_dir: Path | None = None) -> dict[str, Any] | None:
    """The record of a backend whose process still runs (a stale record left by a killed one is ignored)."""
    if data_dir is None:
        from synth_ai.env.paths import data_dir as default_data_dir

        data_dir = default_data_dir(create=False)
    doc = read_record(data_dir)
    if doc is None or not pid_alive(doc["pid"]) or not isinstance(doc.get("api_base"), str):
        return None
    return doc
