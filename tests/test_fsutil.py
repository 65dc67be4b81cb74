"""The two ways files are replaced whole (`synth_ai.fsutil`): a file and a folder. A failure half way leaves the
previous content as it was and no temp file or folder behind."""

from __future__ import annotations

import os
import stat

import pytest

from synth_ai.fsutil import AtomicFile, atomic_write_bytes, atomic_write_text, publish_folder


class Boom(Exception):
    pass


@pytest.fixture
def folder(tmp_path):
    """An empty folder of its own (the suite's fixtures put a home and a workdir in tmp_path)."""
    path = tmp_path / "here"
    path.mkdir()
    return path


def test_atomic_write_replaces_the_file_with_the_mode_asked(folder):
    target = folder / "sub" / "state.json"
    atomic_write_text(target, "old")
    atomic_write_bytes(target, b"new", mode=0o600)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.listdir(target.parent) == ["state.json"]


def test_a_failure_mid_write_keeps_the_old_file_and_leaves_no_temp(folder):
    target = folder / "data.jsonl"
    target.write_text("old\n")
    with pytest.raises(Boom), AtomicFile(target) as out:
        out.write(b"new line 1\n")
        raise Boom
    assert target.read_text() == "old\n"
    assert os.listdir(folder) == ["data.jsonl"]


def test_an_uncommitted_file_is_discarded(folder):
    target = folder / "out.jsonl"
    with AtomicFile(target, durable=False) as out:
        out.write(b"never committed\n")
    assert not target.exists()
    assert os.listdir(folder) == []


def test_writing_bytes_that_cannot_be_written_keeps_the_old_file(folder):
    target = folder / "state.json"
    target.write_text("old")
    with pytest.raises(TypeError):
        atomic_write_bytes(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert os.listdir(folder) == ["state.json"]


def test_publish_folder_replaces_an_older_folder_whole(folder):
    target = folder / "final"
    target.mkdir()
    (target / "stale.bin").write_bytes(b"x")
    with publish_folder(target, durable=True) as staging:
        assert staging.parent == folder and staging.name.startswith(".final.")
        (staging / "model.bin").write_bytes(b"weights")
        (staging / "nested").mkdir()
        (staging / "nested" / "card.json").write_text("{}")
        assert not (target / "model.bin").exists()  # nothing shows before the block ends
    assert sorted(p.name for p in target.iterdir()) == ["model.bin", "nested"]
    assert (target / "nested" / "card.json").read_text() == "{}"
    assert os.listdir(folder) == ["final"]


def test_a_failure_while_filling_a_folder_keeps_the_old_one(folder):
    target = folder / "checkpoints" / "step-000004"
    target.mkdir(parents=True)
    (target / "state.json").write_text('{"step": 4}')
    with pytest.raises(Boom), publish_folder(target) as staging:
        (staging / "state.json").write_text('{"step": 8}')
        raise Boom
    assert (target / "state.json").read_text() == '{"step": 4}'
    assert os.listdir(target.parent) == ["step-000004"]


def test_publish_folder_creates_a_new_folder_and_its_parents(folder):
    target = folder / "models" / "tiny" / "tiny-qwen3-r1"
    with publish_folder(target) as staging:
        (staging / "config.json").write_text("{}")
    assert (target / "config.json").read_text() == "{}"
    assert os.listdir(target.parent) == ["tiny-qwen3-r1"]
