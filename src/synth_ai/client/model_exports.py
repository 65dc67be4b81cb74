"""`synth-ai models export`'s client side: ask the backend to prepare an export, download its files into a folder.

The folder appears whole or not at all: files go into a hidden temp folder beside `DIR`, each checked against the
manifest's sha256, and the temp folder is renamed to `DIR` at the end (`fsutil.publish_folder`). A connection that
drops mid-file is resumed from the bytes already written (`Range`), a few times with backoff.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from synth_ai.client.resources import SynthAPI
from synth_ai.errors import InvalidInputError, NetworkError, NotFoundError, ServerError, UnavailableError
from synth_ai.fsutil import publish_folder

MAX_RESUMES = 5
LIST_HINT = "Run `synth-ai models list` for the models of this backend."


def check_destination(out_dir: Path, *, force: bool) -> None:
    """Refuse a non-empty `out_dir` (or a file there) unless `force`, and a place this process cannot write:
    nothing is asked of the backend first."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InvalidInputError(f"{out_dir} exists and is not a folder.", hint="Pick another --out.")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise InvalidInputError(f"{out_dir} is not empty; the export would mix with its files.",
                                hint="Pick an empty or new folder, or pass --force to replace it.",
                                details={"out": str(out_dir)})
    parent = out_dir.resolve().parent
    try:  # the files are written beside --out first (then renamed into place): that folder must take them
        parent.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.probe.", dir=parent).cleanup()
    except OSError as exc:
        raise unwritable_destination(out_dir, exc) from None


def unwritable_destination(out_dir: Path, exc: OSError) -> InvalidInputError:
    """`--out` could not be written (read-only, not a folder, disk full): what failed and what to do."""
    code = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    blocker = Path(exc.filename) if isinstance(exc.filename, str) else None
    if blocker is not None and exc.errno in (errno.EEXIST, errno.ENOTDIR) and blocker.is_file():
        cause = f"{blocker} is a file, not a folder"
    else:
        cause = f"{exc.strerror or exc} [{code}]" + (f" ({blocker})" if blocker is not None else "")
    hint = ("Free space on that disk, or pick another --out."
            if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "Pick a folder this user can write as --out.")
    return InvalidInputError(f"Cannot write the export to --out {out_dir}: {cause}. Nothing was left there.",
                             hint=hint, details={"out": str(out_dir), "errno": code})


def request_export(api: SynthAPI, model_id: str, *, merge: bool) -> dict[str, Any]:
    """The backend's manifest for `model_id`'s export; a clear error for an unknown model or a backend that
    cannot export."""
    transport = api.transport
    try:
        manifest = transport.post_json("/exports", {"model": model_id, "merge": merge}, repeatable=True)
    except NotFoundError as exc:
        detail = (exc.details or {}).get("detail")
        if isinstance(detail, dict) and detail.get("code") == "model_not_found":
            raise NotFoundError(str(detail.get("message")), hint=str(detail.get("hint") or LIST_HINT),
                                details=detail.get("details")) from None
        raise UnavailableError(
            f"The backend at {transport.api_base} has no export route (POST /exports answered 404): it cannot "
            "hand out model weights.", hint="Export from the embedded backend (`synth-ai models export` without "
            "--backend), where the model was trained.", details={"url": transport.url("/exports")}) from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list) or not manifest.get("id"):
        raise ServerError(f"{transport.url('/exports')} answered without a file list.")
    return manifest


def download_export(api: SynthAPI, manifest: dict[str, Any], out_dir: Path, *,
                    on_file: Callable[[str, int], None] | None = None) -> Path:
    """Every file of the export into `out_dir` (replacing what is there: `check_destination` came first)."""
    out_dir = out_dir.resolve()
    try:
        _download_into(api, manifest, out_dir, on_file)
    except OSError as exc:  # the local side: the network's errors are NetworkError, not OSError
        raise unwritable_destination(out_dir, exc) from None
    return out_dir


def _download_into(api: SynthAPI, manifest: dict[str, Any], out_dir: Path,
                   on_file: Callable[[str, int], None] | None) -> None:
    with publish_folder(out_dir, durable=True) as staging:
        os.chmod(staging, 0o777 & ~_umask())  # the temp folder is private (0700); the result is an ordinary one
        for item in manifest["files"]:
            target = staging / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            _fetch(api, f"/exports/{manifest['id']}/files/{quote(item['path'])}", target, item)
            if on_file is not None:
                on_file(item["path"], int(item["size"]))
        if manifest.get("local_base"):  # the adapter's base came along: point the adapter at its final place
            config_path = staging / "adapter_config.json"
            config = json.loads(config_path.read_text())
            config["base_model_name_or_path"] = str(out_dir / manifest["local_base"])
            config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fetch(api: SynthAPI, path: str, target: Path, item: dict[str, Any]) -> None:
    """One file, resumed from what is written after a broken connection; its sha256 checked at the end."""
    transport = api.transport
    resumes = 0
    with open(target, "wb") as handle:
        while True:
            written = handle.tell()
            try:
                with transport.download(path, offset=written) as (response, chunks):
                    if written and response.status_code != 206:  # the server started over: so do we
                        handle.seek(0)
                        handle.truncate()
                    for chunk in chunks:
                        handle.write(chunk)
                break
            except NetworkError:
                if resumes >= MAX_RESUMES:
                    raise
                handle.flush()
                transport._pause(transport.retry.backoff(resumes), "GET", path, "lost its connection")
                resumes += 1
    digest = hashlib.sha256()
    with open(target, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != item["sha256"]:
        raise ServerError(f"{item['path']} arrived with sha256 {digest.hexdigest()[:12]}…, not the manifest's "
                          f"{item['sha256'][:12]}…; nothing was written to the destination.",
                          hint="Run the command again.")
