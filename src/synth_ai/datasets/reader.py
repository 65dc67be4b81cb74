"""Read a JSONL file as numbered lines, in constant memory, hashing it in the same pass.

The file is read in binary, in fixed-size chunks; lines are memoryviews cut from the chunks at the positions
`bytes.find` gives (no copy, no per-character Python work, no text decoding). Memory held is one chunk, the
hashing queue and the current line, whatever the file's size. Large files are hashed (sha256) on a helper thread:
`hashlib` releases the GIL while it hashes, so hashing overlaps with validation; the bytes hashed are exactly the
bytes handed out as lines.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

CHUNK_SIZE = 1 << 20
_THREAD_MIN = 8 << 20  # smaller files are hashed inline: a thread costs more than it saves
_QUEUE_DEPTH = 2


class _Hasher:
    def __init__(self, threaded: bool) -> None:
        import hashlib  # here, not at module level: loading OpenSSL is a few ms of every `files validate` start

        self._hash = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] | None = None
        self._thread: threading.Thread | None = None
        if threaded:
            self._queue = queue.Queue(maxsize=_QUEUE_DEPTH)
            self._thread = threading.Thread(target=self._run, name="synth-ai-sha256", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        assert self._queue is not None
        update = self._hash.update
        get = self._queue.get
        while (chunk := get()) is not None:
            update(chunk)

    def update(self, chunk: bytes) -> None:
        if self._queue is None:
            self._hash.update(chunk)
        else:
            self._queue.put(chunk)

    def close(self) -> None:
        if self._thread is not None and self._queue is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def hexdigest(self) -> str:
        self.close()
        return self._hash.hexdigest()


class LineReader:
    """Read a file as numbered lines: 1-based numbers counting blank lines; each line without its `\n`, as a
    bytes-like object (a `memoryview` into the chunk read, or `bytes`; `bytes(line)` copies it).

    `batches()` yields `(first_line_no, lines)` for the complete lines of each chunk read (the fast way to walk a
    big file); iterating the reader itself yields `(line_no, line)`. After a complete pass, `complete` is True and
    `sha256` holds the file's digest (when `hash=True`); `bytes_read` counts the bytes read so far.
    """

    def __init__(self, path: str | os.PathLike[str], *, hash: bool = True, chunk_size: int = CHUNK_SIZE,
                 start: int = 0, end: int | None = None) -> None:
        self.path = Path(path)
        self.hash = hash and start == 0 and end is None  # a digest of part of a file would be misleading
        self.chunk_size = chunk_size
        self.start = start
        self.end = end  # read [start, end): a range that `split_ranges` cut at line boundaries
        self.bytes_read = 0
        self.complete = False
        self.sha256: str | None = None

    def batches(self) -> Iterator[tuple[int, list[bytes]]]:
        with open(self.path, "rb", buffering=0) as fh:
            size = os.fstat(fh.fileno()).st_size
            hasher = _Hasher(threaded=size >= _THREAD_MIN) if self.hash else None
            try:
                next_line = 1
                tail: list[bytes | memoryview] = []  # the start of a line continuing in the next chunk
                read = fh.read
                chunk_size = self.chunk_size
                left = size if self.end is None else self.end - self.start
                if self.start:
                    fh.seek(self.start)
                while left > 0 and (chunk := read(min(chunk_size, left))):
                    left -= len(chunk)
                    self.bytes_read += len(chunk)
                    if hasher is not None:
                        hasher.update(chunk)
                    find = chunk.find
                    nl = find(b"\n")
                    if nl < 0:  # a line longer than a chunk
                        tail.append(chunk)
                        continue
                    view = memoryview(chunk)  # lines are views: no copy of the data
                    if tail:
                        tail.append(view[:nl])
                        lines: list[bytes | memoryview] = [b"".join(tail)]
                        tail = []
                    else:
                        lines = [view[:nl]]
                    pos = nl + 1
                    while (nl := find(b"\n", pos)) >= 0:
                        lines.append(view[pos:nl])
                        pos = nl + 1
                    if pos < len(chunk):
                        tail.append(view[pos:])
                    yield next_line, lines
                    next_line += len(lines)
                if tail:
                    yield next_line, [b"".join(tail)]
                self.complete = True
                if hasher is not None:
                    self.sha256 = hasher.hexdigest()
            finally:
                if hasher is not None:
                    hasher.close()

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        for first, lines in self.batches():
            yield from enumerate(lines, first)


def split_ranges(path: str | os.PathLike[str], parts: int) -> list[tuple[int, int]]:
    """Cut a file into about `parts` byte ranges of similar size, each made of whole lines."""
    size = os.path.getsize(path)
    bounds = [0]
    with open(path, "rb") as fh:
        for i in range(1, parts):
            target = max(size * i // parts, bounds[-1] + 1)
            if target >= size:
                break
            fh.seek(target - 1)
            fh.readline()  # to the end of the line holding byte target-1
            cut = fh.tell()
            if cut >= size:
                break
            if cut > bounds[-1]:
                bounds.append(cut)
    bounds.append(size)
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a] or [(0, size)]


def is_blank(line: bytes | memoryview) -> bool:
    return not line or (line[0] != 123 and bytes(line).isspace())  # 123: "{", how records start
