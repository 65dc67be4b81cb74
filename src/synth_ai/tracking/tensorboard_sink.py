"""TensorBoard: an event file per worker run in the job's folder (default `<data dir>/tracking/tensorboard/<job
id>`), written with the `tensorboard` package alone (no torch, no TensorFlow): scalars, the resolved config and
sample tables as text (Markdown), the final model as text at the end."""

from __future__ import annotations

import json
import time
from typing import Any

from synth_ai.tracking.settings import TrackingSettings
from synth_ai.tracking.tables import SampleTable, as_markdown

FLUSH_S = 2.0  # points reach the file (and a watching TensorBoard) within seconds


class TensorBoardSink:
    name = "tensorboard"
    fix = "make [logging].tensorboard_dir a folder the backend can write"
    folder_setting = "[logging].tensorboard_dir"

    def __init__(self) -> None:
        self.writer: Any = None

    def start(self, settings: TrackingSettings, config: dict[str, Any]) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        settings.tensorboard_dir.mkdir(parents=True, exist_ok=True)
        self.writer = EventFileWriter(str(settings.tensorboard_dir), flush_secs=FLUSH_S)
        self._text("config", 0, "```json\n" + json.dumps(config, indent=2, sort_keys=True, default=str) + "\n```")

    def log(self, step: int, values: dict[str, float]) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=name, simple_value=float(v)) for name, v in values.items()])
        self._emit(step, summary)

    def table(self, table: SampleTable) -> None:
        self._text(f"samples/{table.name}", table.step, as_markdown(table))

    def finish(self, summary: dict[str, Any], tags: list[str], status: str) -> None:
        lines = [f"- **{k}**: {v}" for k, v in summary.items()] + [f"- **status**: {status}"]
        self._text("summary", 0, "\n".join(lines))
        self.writer.close()

    def _text(self, tag: str, step: int, text: str) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.types_pb2 import DT_STRING
        from tensorboard.plugins.text.metadata import create_summary_metadata

        tensor = TensorProto(dtype=DT_STRING, string_val=[text.encode("utf-8")])
        metadata = create_summary_metadata(display_name=tag, description="")
        self._emit(step, Summary(value=[Summary.Value(tag=tag, tensor=tensor, metadata=metadata)]))

    def _emit(self, step: int, summary: Any) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        self.writer.add_event(Event(wall_time=time.time(), step=int(step), summary=summary))
