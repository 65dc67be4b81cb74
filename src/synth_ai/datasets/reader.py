"""Read a JSONL file as numbered lines, in constant memory, hashing it in the same pass.

The file is mapped (mmap) and walked in fixed-size windows; lines are bounds into the mapping, or memoryviews of it
(no copy, no per-character Python work, no text decoding). Pages of windows already walked are released, so memory
held is about two windows and the hashing queue, whatever the file's size; a file that cannot be mapped is read in
chunks instead. Large files are hashed (sha256) on a helper thread: `hashlib` releases the GIL while it hashes, so
hashing overlaps with validation; the bytes hashed are exactly the bytes handed out as lines.
"""

from __future__ import annotations

import mmap
import os

TYPE_CHECKING = False  # `typing` is not loaded at run time (see `slots`)
if TYPE_CHECKING:
    import queue
    import threading
    from collections.abc import Iterator
    from typing import Any

CHUNK_SIZE = 1 << 20
# Files are mapped where pages can be released behind the reader (POSIX); elsewhere they are read in chunks.
_MAPPABLE = hasattr(mmap, "PROT_READ") and hasattr(mmap, "MADV_DONTNEED") and hasattr(mmap.mmap, "madvise")
_THREAD_MIN = 8 << 20  # smaller files are hashed inline: a thread costs more than it saves
_QUEUE_DEPTH = 2


class _Hasher:
    def __init__(self, threaded: bool) -> None:
        import hashlib  # here, not at module level: loading OpenSSL is a few ms of every `files validate` start

        self._hash = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] | None = None
        self._thread: threading.Thread | None = None
        if threaded:
            import queue
            import threading

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

    `spans()` and `batches()` give the complete lines of each window, as bounds or as views (the fast ways to walk
    a big file); iterating the reader itself yields `(line_no, line)`. After a complete pass, `complete` is True
    and `sha256` holds the file's digest (when `hash=True`); `bytes_read` counts the bytes read so far.
    """

    def __init__(self, path: str | os.PathLike[str], *, hash: bool = True, chunk_size: int = CHUNK_SIZE,
                 start: int = 0, end: int | None = None) -> None:
        self.path = path
        self.hash = hash and start == 0 and end is None  # a digest of part of a file would be misleading
        self.chunk_size = chunk_size
        self.start = start
        self.end = end  # read [start, end): a range that `split_ranges` cut at line boundaries
        self.bytes_read = 0
        self.complete = False
        self.sha256: str | None = None

    def spans(self) -> Iterator[tuple[int, bytes | mmap.mmap, list[int]]]:
        """`(first_line_no, buffer, bounds)` per part of the file: its complete lines are
        `buffer[bounds[2k]:bounds[2k+1]]` (`buffer.find` works on them without a copy)."""
        with open(self.path, "rb", buffering=0) as fh:
            size = os.fstat(fh.fileno()).st_size
            hasher = _Hasher(threaded=size >= _THREAD_MIN) if self.hash else None
            try:
                end = size if self.end is None else min(self.end, size)
                try:
                    mapped = (mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
                              if end > self.start and _MAPPABLE else None)
                except (OSError, ValueError):  # not a regular file (a pipe, a device): read it
                    mapped = None
                parts = (self._mapped_spans(mapped, end, hasher) if mapped is not None
                         else self._read_spans(fh, end, hasher))
                yield from parts
                self.complete = True
                if hasher is not None:
                    self.sha256 = hasher.hexdigest()
            finally:
                if hasher is not None:
                    hasher.close()

    def _mapped_spans(self, mapped: mmap.mmap, end: int, hasher: _Hasher | None
                      ) -> Iterator[tuple[int, mmap.mmap, list[int]]]:
        """The file mapped, in windows of `chunk_size`: no copy into Python objects, no line ever joined. The
        pages of each window already walked are dropped from this process's memory (they stay in the page cache),
        so the resident size stays that of a window, whatever the file's size. (The mapping is never closed here:
        lines handed out as views keep it alive, and it goes with them.)"""
        find = mapped.find
        view = memoryview(mapped)
        page = mmap.PAGESIZE
        pos = self.start
        dropped = pos // page * page
        next_line = 1
        while pos < end:
            limit = min(pos + self.chunk_size, end)
            bounds: list[int] = []
            while pos < limit:
                nl = find(b"\n", pos, end)
                stop = end if nl < 0 else nl
                bounds += (pos, stop)
                pos = stop + 1
            pos = min(pos, end)
            if hasher is not None:
                hasher.update(view[bounds[0]:pos])
            self.bytes_read = pos - self.start
            yield next_line, mapped, bounds
            next_line += len(bounds) // 2
            done = pos // page * page
            if done - dropped >= self.chunk_size:
                mapped.madvise(mmap.MADV_DONTNEED, dropped, done - dropped)
                dropped = done

    def _read_spans(self, fh: Any, end: int, hasher: _Hasher | None) -> Iterator[tuple[int, bytes, list[int]]]:
        """The same lines read in chunks, for files that cannot be mapped; a line longer than a chunk comes
        joined."""
        next_line = 1
        tail: list[bytes | memoryview] = []  # the start of a line continuing in the next chunk
        read = fh.read
        chunk_size = self.chunk_size
        left = end - self.start
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
            bounds: list[int] = [0, nl]
            if tail:
                tail.append(memoryview(chunk)[:nl])
                joined = b"".join(tail)
                tail = []
                yield next_line, joined, [0, len(joined)]
                next_line += 1
                bounds = []
            pos = nl + 1
            while (nl := find(b"\n", pos)) >= 0:
                bounds += (pos, nl)
                pos = nl + 1
            if pos < len(chunk):
                tail.append(memoryview(chunk)[pos:])
            if bounds:
                yield next_line, chunk, bounds
                next_line += len(bounds) // 2
        if tail:
            joined = b"".join(tail)
            yield next_line, joined, [0, len(joined)]

    def batches(self) -> Iterator[tuple[int, list[bytes | memoryview]]]:
        """`(first_line_no, lines)` per chunk read, each line a view into the chunk (the fast way to walk a file)."""
        for first, buf, bounds in self.spans():
            view = memoryview(buf)
            yield first, [view[bounds[k]:bounds[k + 1]] for k in range(0, len(bounds), 2)]

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
