"""Checking a file in forked processes (`synth_ai.datasets.parallel`): the same report as one process, and a
child that fails, dies or is left behind by a failing parent is reported and reaped, never waited on forever."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from synth_ai.datasets import parallel
from synth_ai.datasets.validate import _worker_count, validate_jsonl

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="parallel checking forks (Linux only)")


def chat(i: int) -> str:
    return json.dumps({"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]})


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "mixed.jsonl"
    lines = [chat(i) if i % 9 else "{broken" for i in range(600)]
    lines[300] = json.dumps({"messages": [{"role": "user", "content": "only one turn"}]})
    path.write_text("\n".join(lines) + "\n\n")
    return path


@pytest.fixture
def forked(monkeypatch):
    """The pids `os.fork` returned to this process during the test."""
    pids: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return pids


def all_reaped(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # already reaped by validate_jsonl
            continue
        return False
    return True


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_several_processes_give_the_one_process_report(dataset, forked, workers):
    one = validate_jsonl(dataset, workers=1, max_errors=7).to_dict()
    many = validate_jsonl(dataset, workers=workers, max_errors=7).to_dict()
    assert many == one
    assert one["error_count"] == 68 and [e["line"] for e in one["errors"]] == [1, 10, 19, 28, 37, 46, 55]
    assert forked and all_reaped(forked)


def _failing_in_children(how):
    real = parallel._scan_range

    def scan(path, start, end, *rest):
        if start > 0:  # a child's range
            how()
        return real(path, start, end, *rest)

    return scan


def test_a_child_that_raises_is_reported_with_its_error(dataset, forked, monkeypatch):
    def boom():
        raise OSError("disk went away")

    monkeypatch.setattr(parallel, "_scan_range", _failing_in_children(boom))
    with pytest.raises(RuntimeError, match="a dataset validation worker failed: OSError: disk went away"):
        validate_jsonl(dataset, workers=2)
    assert forked and all_reaped(forked)


def test_a_child_that_dies_is_reported_with_how_it_ended(dataset, forked, monkeypatch):
    monkeypatch.setattr(parallel, "_scan_range", _failing_in_children(lambda: os.kill(os.getpid(), 9)))
    with pytest.raises(RuntimeError, match=r"a dataset validation worker died \(killed by signal 9\)"):
        validate_jsonl(dataset, workers=3)
    assert forked and all_reaped(forked)


def test_when_this_process_fails_its_children_are_killed_not_awaited(dataset, forked, monkeypatch):
    real = parallel._scan_range

    def scan(path, start, end, *rest):
        if start > 0:
            time.sleep(600)  # a child that would take ten minutes
        else:
            raise KeyboardInterrupt  # Ctrl-C in this process while the children work
        return real(path, start, end, *rest)

    monkeypatch.setattr(parallel, "_scan_range", scan)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        validate_jsonl(dataset, workers=2)
    assert time.monotonic() - started < 60  # killed, not waited for
    assert forked and all_reaped(forked)


def test_the_default_uses_idle_cpus_only_and_big_enough_parts(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.0, 0.0))
    assert _worker_count(0, 200 << 20) == 4
    assert _worker_count(0, 40 << 20) == 2  # 16 MiB per process at least
    assert _worker_count(0, 10 << 20) == 1
    monkeypatch.setattr(os, "getloadavg", lambda: (2.6, 0.0, 0.0))
    assert _worker_count(0, 200 << 20) == 2  # two of four CPUs busy, a third partly
    monkeypatch.setattr(os, "getloadavg", lambda: (3.2, 0.0, 0.0))
    assert _worker_count(0, 200 << 20) == 1
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 0.0, 0.0))
    assert _worker_count(0, 200 << 20) == 1
    assert _worker_count(3, 1) == 3 and _worker_count(1, 200 << 20) == 1  # asked for: as asked
