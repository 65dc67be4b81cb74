"""Constant memory: the Python heap peak while validating does not grow with the file (no timing asserted)."""

from __future__ import annotations

import base64
import json
import os
import tracemalloc
from pathlib import Path

from synth_ai.datasets import iter_normalized_records, validate_jsonl

MiB = 2**20


def generate(path: Path, megabytes: int) -> Path:
    payload = base64.b64encode(b"\x89PNG\r\n\x1a\n" + os.urandom(40_000)).decode()
    line = json.dumps({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "what is on screen?"},
                                     {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{payload}"}}]},
        {"role": "assistant", "content": "a tree"},
    ]}) + "\n"
    with open(path, "w") as fh:
        for _ in range(megabytes * 1_000_000 // len(line) + 1):
            fh.write(line)
    return path


def peak_while(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_memory_is_flat_in_file_size(tmp_path):
    small = generate(tmp_path / "small.jsonl", 2)
    large = generate(tmp_path / "large.jsonl", 20)

    def check(path: Path) -> None:
        report = validate_jsonl(path)
        assert report.ok and report.sha256

    def stream(path: Path) -> None:
        for _ in iter_normalized_records(path):
            pass

    for run in (check, stream):
        small_peak = peak_while(lambda: run(small))
        large_peak = peak_while(lambda: run(large))
        # Both stay under one bound, far below the 20 MB file, and 18 MB more data adds at most the fixed buffers
        # of the hashing thread that big files get (a few 1 MiB chunks), not anything proportional.
        assert large_peak < 8 * MiB, (run.__name__, small_peak, large_peak)
        assert large_peak - small_peak < 3 * MiB, (run.__name__, small_peak, large_peak)
