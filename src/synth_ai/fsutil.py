"""Writes that readers never see half done: a file (`AtomicFile`, `atomic_write_bytes`) or a folder
(`publish_folder`) is built under a hidden temp name beside its target and renamed into place only when complete.
A failure removes the temp copy and leaves the previous target, if any, as it was."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType


class AtomicFile:
    """A binary file written to `.<name>.*.tmp` beside `path`; `commit()` renames it over `path`, `discard()` (or
    leaving a `with` block without committing) deletes it. `mode` is set on the temp file before anything is
    written, so the final file never has looser permissions; `durable` fsyncs it before the rename."""

    def __init__(self, path: str | os.PathLike[str], *, mode: int = 0o644, durable: bool = True) -> None:
        self.path = Path(path)
        self.durable = durable
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        self._temp = Path(temp)
        try:
            os.fchmod(fd, mode)
            self.handle = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            self._temp.unlink(missing_ok=True)
            raise

    def write(self, data: bytes) -> None:
        self.handle.write(data)

    def commit(self) -> Path:
        try:
            self.handle.flush()
            if self.durable:
                os.fsync(self.handle.fileno())
            self.handle.close()
            os.replace(self._temp, self.path)
        except BaseException:
            self.discard()
            raise
        return self.path

    def discard(self) -> None:
        if not self.handle.closed:
            self.handle.close()
        self._temp.unlink(missing_ok=True)

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None or not self.handle.closed:
            self.discard()  # a committed file is in place already; anything else is thrown away


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> Path:
    """Write `data` to a temp file in the same directory, fsync, then rename over `path`."""
    with AtomicFile(path, mode=mode) as out:
        out.write(data)
        return out.commit()


def atomic_write_text(path: str | os.PathLike[str], text: str, *, mode: int = 0o644) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def write_secret_file(path: str | os.PathLike[str], text: str) -> Path:
    """Credentials: created 0600 (never briefly world-readable, since the temp file is 0600 from the start), in
    a folder that, when this creates it, is 0700 from the start too."""
    Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return atomic_write_text(path, text, mode=0o600)


@contextmanager
def publish_folder(target: str | os.PathLike[str], *, durable: bool = False) -> Iterator[Path]:
    """Yield an empty hidden folder (`.<name>.*`) beside `target` to fill; when the block ends without an error it
    takes `target`'s place (an older `target` is moved aside first and removed after), else it is removed and
    `target` stays as it was. `durable` fsyncs every file in it before the rename."""
    final = Path(target)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        yield staging
        if durable:
            for file in staging.rglob("*"):
                if file.is_file():
                    with open(file, "rb") as handle:
                        os.fsync(handle.fileno())
        _swap_in(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap_in(staging: Path, final: Path) -> None:
    """Rename `staging` to `final`; a folder already at `final` is renamed aside (under the staging folder's
    hidden name, so a crash leaves only hidden leftovers) and deleted once the new one is in place."""
    if not final.exists():
        os.replace(staging, final)
        return
    old = staging.with_name(f"{staging.name}.old")
    os.replace(final, old)
    try:
        os.replace(staging, final)
    except BaseException:
        os.replace(old, final)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def exclusive_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (created empty if missing) for the block: other processes, and other
    threads of this one (the lock belongs to the open file description), wait until it ends."""
    import fcntl

    lock_path = Path(path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
