"""Timestamps as the backend stores and answers them: UTC, ISO 8601, milliseconds, a trailing `Z`."""

from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> str:
    return iso_utc(datetime.now(timezone.utc))


def iso_utc(moment: datetime) -> str:
    """`moment` (timezone-aware) in the backend's form."""
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def file_time(mtime: float) -> str:
    """A file's modification time (`stat().st_mtime`) in the backend's form."""
    return iso_utc(datetime.fromtimestamp(mtime, timezone.utc))
