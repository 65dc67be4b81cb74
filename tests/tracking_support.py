"""Readers for the tests of experiment tracking, each the tracker's own: TensorBoard's EventAccumulator, wandb's
protobuf records of an offline run's `.wandb` file (its leveldb-style log, read block by block), MlflowClient."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

WANDB_BLOCK = 32768


def tensorboard_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """Every scalar series under `folder`; none while the writer has not made the folder yet (EventAccumulator would
    raise that it was deleted)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not Path(folder).is_dir():
        return {}
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def tensorboard_texts(folder: Path) -> dict[str, list[str]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    acc.Reload()
    return {tag: [b"".join(e.tensor_proto.string_val).decode() for e in acc.Tensors(tag)]
            for tag in acc.Tags()["tensors"]}


def wandb_records(path: Path) -> list[Any]:
    """The Record messages of a `.wandb` file: a 7-byte header, then 32 KiB blocks of chunks (crc32, length,
    type: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    raw = path.read_bytes()
    assert raw[:4] == b":W&B", raw[:8]
    pos, parts, records = 7, [], []
    while pos + 7 <= len(raw):
        left = WANDB_BLOCK - pos % WANDB_BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        if pos + 7 + length > len(raw):  # a chunk still being written
            break
        parts.append(raw[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            records.append(record)
            parts = []
    return records


def wandb_run(folder: Path) -> dict[str, Any]:
    """An offline run under `folder` (a WANDB dir): its history rows, summary, config, tags and name."""
    files = sorted(folder.rglob("run-*.wandb"))
    files = [f for f in files if "latest-run" not in f.parts]
    assert len(files) == 1, files
    history, summary, config, tags, name = [], {}, {}, [], None
    for record in _finished_records(files[0]):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "run":
            name = record.run.display_name
            tags = list(record.run.tags)
            config.update({u.key: json.loads(u.value_json) for u in record.run.config.update})
        elif kind == "config":
            config.update({u.key: json.loads(u.value_json) for u in record.config.update})
    return {"history": history, "summary": summary, "config": config, "tags": tags, "name": name,
            "file": files[0]}


def _finished_records(path: Path, wait_s: float = 120.0) -> list[Any]:
    """The file's records once wandb's service process has written the run's `exit` record: `run.finish()` hands
    the records to that process, which may still be writing them when a loaded machine returns control."""
    deadline = time.monotonic() + wait_s
    while True:
        records = wandb_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def series(history: list[dict[str, Any]], name: str) -> dict[int, float]:
    return {int(row["step"]): row[name] for row in history if name in row and "step" in row}
