"""Streaming multipart/form-data bodies for file uploads, in constant memory.

The body is produced chunk by chunk straight from the file, with an exact `Content-Length` (so a server can refuse
an oversized upload before reading it), and a progress callback per chunk. Each call makes a fresh body, so a
retried upload starts again from the first byte.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

CHUNK_BYTES = 1 << 20


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\r", " ").replace("\n", " ")


def multipart_file_body(
    path: Path,
    *,
    fields: Mapping[str, str],
    file_field: str = "file",
    filename: str | None = None,
    content_type: str = "application/jsonl",
    on_progress: Callable[[int], None] | None = None,
) -> tuple[Iterator[bytes], dict[str, str]]:
    """(body chunks, headers) for a form with text `fields` and one file part streamed from `path`."""
    boundary = f"synth-ai-{uuid.uuid4().hex}"
    head = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{_quote(k)}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    )
    head += (f'--{boundary}\r\nContent-Disposition: form-data; name="{_quote(file_field)}"; '
             f'filename="{_quote(filename or path.name)}"\r\nContent-Type: {content_type}\r\n\r\n').encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    size = path.stat().st_size

    def chunks() -> Iterator[bytes]:
        yield head
        sent = 0
        with path.open("rb") as handle:
            while True:
                block = handle.read(CHUNK_BYTES)
                if not block:
                    break
                sent += len(block)
                if on_progress is not None:
                    on_progress(sent)
                yield block
        yield tail

    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}",
               "Content-Length": str(len(head) + size + len(tail))}
    return chunks(), headers
