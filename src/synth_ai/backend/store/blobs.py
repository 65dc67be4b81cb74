"""Uploaded content: a streaming multipart receiver and a content-addressed blob store.

An upload is parsed from the request stream chunk by chunk (python-multipart's push parser): the file part goes
straight into a temp file under `backend/tmp/` while its sha256 and size are computed, so memory stays flat
whatever the size. Only when the whole body has arrived and passed the checks is the temp file fsynced and renamed
to `blobs/<sha[:2]>/<sha>`: a reader sees a complete blob or none. The same content uploaded twice is one blob.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

try:  # python-multipart >= 0.0.13 names its package `python_multipart`; older releases call it `multipart`
    from python_multipart.multipart import MultipartParser, parse_options_header
except ImportError:  # pragma: no cover - depends on the installed release
    from multipart.multipart import MultipartParser, parse_options_header  # type: ignore[no-redef]

MAX_FIELD_BYTES = 64 * 1024
MAX_FORM_BYTES = 1024 * 1024  # all part headers and non-file fields of one body together (kept in memory)
COPY_CHUNK = 1024 * 1024


class UploadError(Exception):
    """The request body is not an acceptable upload (status 400 unless a subclass says otherwise)."""

    status_code = 400
    code = "invalid_upload"


class UploadTooLarge(UploadError):
    status_code = 413
    code = "upload_too_large"


@dataclass
class ReceivedUpload:
    fields: dict[str, str]
    filename: str
    content_type: str | None
    size: int
    sha256: str
    temp_path: Path


@dataclass
class _Part:
    name: str = ""
    filename: str | None = None
    content_type: str | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    data: bytearray = field(default_factory=bytearray)


class MultipartReceiver:
    """Push parser for one `multipart/form-data` body with one file part (named `file_field`)."""

    def __init__(self, content_type: str, tmp_dir: Path, *, max_bytes: int, file_field: str = "file") -> None:
        kind, params = parse_options_header(content_type)
        if kind != b"multipart/form-data" or b"boundary" not in params:
            raise UploadError("Expected a multipart/form-data body with a `file` part and a `purpose` field.")
        self.max_bytes = max_bytes
        self.file_field = file_field
        self.fields: dict[str, str] = {}
        self._tmp_dir = tmp_dir
        self._part = _Part()
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._file = None  # open temp file while the file part streams
        self._temp_path: Path | None = None
        self._hasher = hashlib.sha256()
        self._size = 0
        self._form_bytes = 0
        self._filename: str | None = None
        self._file_content_type: str | None = None
        self._file_done = False
        self._error: UploadError | None = None
        self._parser = MultipartParser(params[b"boundary"], {
            "on_part_begin": self._on_part_begin,
            "on_part_data": self._on_part_data,
            "on_part_end": self._on_part_end,
            "on_header_field": self._on_header_field,
            "on_header_value": self._on_header_value,
            "on_header_end": self._on_header_end,
            "on_headers_finished": self._on_headers_finished,
        })

    # Parser callbacks -------------------------------------------------------------------------------------------
    def _on_part_begin(self) -> None:
        self._part = _Part()

    def _count_form_bytes(self, n: int) -> None:
        self._form_bytes += n
        if self._form_bytes > MAX_FORM_BYTES:
            raise UploadError(f"The form fields and part headers are larger than {MAX_FORM_BYTES} bytes in all; "
                              "send one `file` part and a `purpose` field.")

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._count_form_bytes(end - start)
        self._header_name += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._count_form_bytes(end - start)
        self._header_value += data[start:end]

    def _on_header_end(self) -> None:
        self._part.headers.append((bytes(self._header_name).lower(), bytes(self._header_value)))
        self._header_name.clear()
        self._header_value.clear()

    def _on_headers_finished(self) -> None:
        part = self._part
        for name, value in part.headers:
            if name == b"content-disposition":
                _, options = parse_options_header(value)
                part.name = options.get(b"name", b"").decode("utf-8", "replace")
                if b"filename" in options:
                    part.filename = options[b"filename"].decode("utf-8", "replace")
            elif name == b"content-type":
                part.content_type = value.decode("latin-1").strip() or None
        if part.filename is not None or part.name == self.file_field:
            if part.name != self.file_field:
                raise UploadError(f"Unexpected file part {part.name!r}; send the content as the `file` part.")
            if self._file is not None or self._file_done:
                raise UploadError("Only one `file` part is accepted per upload.")
            self._filename = _safe_filename(part.filename or "upload")
            self._file_content_type = part.content_type
            self._tmp_dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix="upload-", suffix=".part", dir=self._tmp_dir)
            self._temp_path = Path(tmp)
            self._file = os.fdopen(fd, "wb", buffering=0)

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._file is not None and not self._file_done and (self._part.name == self.file_field):
            view = memoryview(data)[start:end]
            self._size += len(view)
            if self._size > self.max_bytes:
                raise UploadTooLarge(too_large_message(self.max_bytes))
            self._hasher.update(view)
            self._file.write(view)
        else:
            if len(self._part.data) + (end - start) > MAX_FIELD_BYTES:
                raise UploadError(f"Form field {self._part.name!r} is larger than {MAX_FIELD_BYTES} bytes.")
            self._count_form_bytes(end - start)
            self._part.data += data[start:end]

    def _on_part_end(self) -> None:
        if self._file is not None and self._part.name == self.file_field and not self._file_done:
            self._file_done = True
        elif self._part.name:
            self.fields[self._part.name] = self._part.data.decode("utf-8", "replace")

    # Driving ----------------------------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Parse the next piece of the body (blocking: call it from a worker thread)."""
        try:
            self._parser.write(data)
        except UploadError:
            self.abort()
            raise
        except Exception as exc:  # python-multipart's parse errors
            self.abort()
            raise UploadError(f"Malformed multipart body: {exc}") from None

    def finish(self) -> ReceivedUpload:
        """The body has ended: flush and fsync the temp file and describe the upload."""
        try:
            self._parser.finalize()
        except Exception as exc:
            self.abort()
            raise UploadError(f"Malformed multipart body: {exc}") from None
        if self._file is None or self._temp_path is None or not self._file_done:
            self.abort()
            raise UploadError("The upload has no complete `file` part.")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        return ReceivedUpload(fields=dict(self.fields), filename=self._filename or "upload",
                              content_type=self._file_content_type, size=self._size,
                              sha256=self._hasher.hexdigest(), temp_path=self._temp_path)

    def abort(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None
        if self._temp_path is not None:
            try:
                self._temp_path.unlink()
            except FileNotFoundError:
                pass


def too_large_message(limit: int) -> str:
    return (f"The upload is larger than this backend's limit of {limit} bytes ({limit / 1024**2:.1f} MiB). "
            "Raise it with SYNTH_AI_BACKEND_MAX_UPLOAD_BYTES when starting the backend, or split the dataset.")


def _safe_filename(name: str) -> str:
    base = name.replace("\\", "/").rsplit("/", 1)[-1].strip()
    cleaned = "".join(ch for ch in base if ch.isprintable())
    return cleaned[:255] or "upload"


class BlobStore:
    """Content-addressed files: `root/<sha[:2]>/<sha>`; every write is temp → fsync → rename."""

    def __init__(self, root: Path, tmp_dir: Path) -> None:
        self.root = root
        self.tmp_dir = tmp_dir

    def path_for(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file()

    def commit(self, temp_path: Path, sha256: str) -> Path:
        """Move a complete, fsynced temp file into place (or drop it when the blob already exists)."""
        target = self.path_for(sha256)
        if target.is_file() and target.stat().st_size == temp_path.stat().st_size:
            temp_path.unlink()
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(temp_path, 0o600)
        os.replace(temp_path, target)
        _fsync_dir(target.parent)
        return target

    def delete(self, sha256: str) -> None:
        try:
            self.path_for(sha256).unlink()
        except FileNotFoundError:
            pass

    def verify(self, sha256: str) -> bool:
        path = self.path_for(sha256)
        if not path.is_file():
            return False
        return sha256_of(path) == sha256

    def clean_tmp(self) -> int:
        """Remove uploads that were in flight when a previous backend died; returns how many."""
        removed = 0
        if self.tmp_dir.is_dir():
            for path in self.tmp_dir.iterdir():
                if path.name.startswith("upload-"):
                    try:
                        path.unlink()
                        removed += 1
                    except OSError:
                        pass
        return removed


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(COPY_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
