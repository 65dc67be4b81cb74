"""`synth-ai models export` where the destination cannot take the files, and the export route's answers to Range
headers it cannot serve, against a real embedded backend with the tiny Qwen3. A full disk is injected at the file
level (the download's file object raises ENOSPC after a few KB, as a full disk does); a folder under a regular file
is unwritable for every user, root included."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest

from backend_support import TINY_TEXT, BackendProcess
from conftest import run_cli


@pytest.fixture
def backend(shared_backend: BackendProcess) -> BackendProcess:
    """The worker's shared backend: these tests only download the tiny Qwen3 it holds."""
    return shared_backend


@pytest.fixture(autouse=True)
def backend_key(backend, monkeypatch):
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)


def _export(backend, out: Path):
    return run_cli("--json", "models", "export", TINY_TEXT, "--out", str(out), "--backend", backend.url)


def test_an_out_folder_that_cannot_be_made_is_refused_before_the_backend_is_asked(backend, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    out = blocker / "model"
    result = _export(backend, out)
    assert result.exit_code == 3, result.stdout + result.stderr
    error = result.json()["error"]
    assert f"--out {out}" in error["message"] and f"{blocker} is a file, not a folder" in error["message"], error
    assert "This is a bug" not in result.stdout + result.stderr


class _DiskFullAfter(io.FileIO):
    LIMIT = 4096

    def write(self, data) -> int:
        if self.tell() + len(data) > self.LIMIT:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.name)
        return super().write(data)


def test_a_full_disk_names_out_and_leaves_nothing_behind(backend, tmp_path, monkeypatch):
    import builtins

    import synth_ai.client.model_exports as model_exports

    def open_on_a_full_disk(file, mode="r", *args, **kwargs):
        return _DiskFullAfter(file, "wb") if mode == "wb" else builtins.open(file, mode, *args, **kwargs)

    monkeypatch.setattr(model_exports, "open", open_on_a_full_disk, raising=False)
    out = tmp_path / "exports" / "model"
    result = _export(backend, out)
    assert result.exit_code == 3, result.stdout + result.stderr
    error = result.json()["error"]
    assert f"--out {out}" in error["message"] and "No space left on device" in error["message"], error
    assert "Free space" in error["hint"] and error["details"]["errno"] == "ENOSPC"
    assert not out.exists() and list(out.parent.iterdir()) == []  # no half folder, no hidden temp copy


def test_range_errors_of_the_export_route_have_the_api_error_shape(backend):
    with backend.client() as api:
        manifest = api.post("/exports", json={"model": TINY_TEXT}).json()
        item = manifest["files"][0]
        url = f"/exports/{manifest['id']}/files/{item['path']}"
        partial = api.get(url, headers={"Range": "bytes=1-"})
        assert partial.status_code == 206 and len(partial.content) == item["size"] - 1
        malformed = api.get(url, headers={"Range": "bytes=abc"})
        past_end = api.get(url, headers={"Range": f"bytes={item['size']}-"})
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "invalid_range", malformed.text
    assert past_end.status_code == 416 and past_end.json()["error"]["code"] == "range_not_satisfiable", past_end.text
    assert past_end.headers["content-range"] == f"bytes */{item['size']}"
    assert str(item["size"]) in past_end.json()["error"]["message"]
