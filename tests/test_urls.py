"""`synth_ai.urls.join_url`: one slash at each seam."""

from __future__ import annotations

import pytest

from synth_ai.urls import join_url


@pytest.mark.parametrize("base,parts,expected", [
    ("http://h:1", ("health",), "http://h:1/health"),
    ("http://h:1/", ("/health",), "http://h:1/health"),
    ("http://h:1//", ("//health",), "http://h:1/health"),
    ("http://h:1/api", ("/files", "file_1"), "http://h:1/api/files/file_1"),
    ("http://h:1/api/", ("files/", "/file_1"), "http://h:1/api/files/file_1"),
    ("http://h:1", ("/",), "http://h:1/"),
    ("http://h:1/", ("login?token=a/b",), "http://h:1/login?token=a/b"),
    ("http://h:1/", (), "http://h:1"),
])
def test_one_slash_at_each_seam(base: str, parts: tuple[str, ...], expected: str) -> None:
    assert join_url(base, *parts) == expected
