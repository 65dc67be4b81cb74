"""Joining URLs, the one way: exactly one slash at each seam, whatever slashes the pieces came with."""

from __future__ import annotations


def join_url(base: str, *parts: str) -> str:
    """`join_url("http://h:1/", "/api", "files")` → `http://h:1/api/files`. A trailing slash on the last part is
    kept (`join_url(base, "/")` → `base/`), as is a query string in it; `base` itself is not otherwise changed."""
    url = base
    for part in parts:
        url = f"{url.rstrip('/')}/{part.lstrip('/')}"
    return url.rstrip("/") if not parts else url
