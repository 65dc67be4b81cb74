"""Timestamps as the backend stores and answers them: UTC, ISO 8601, milliseconds, a trailing `Z`."""

from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
