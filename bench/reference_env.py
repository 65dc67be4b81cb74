"""The reference baseline: synth-ai 0.2.17 from PyPI, in its own virtualenv.

Several benches compare us against the released package. They share one
virtualenv at ``bench/.cache/ref-venv`` (gitignored), built once and reused:

    from reference_env import ensure_reference_venv   # with bench/ on sys.path
    python = ensure_reference_venv()                  # path of the venv's python
    cli = reference_cli()                             # its `synth-ai` script

Run as a script (``python bench/reference_env.py``) it builds the venv if
needed and prints the venv's python path on stdout; progress goes to stderr.

The venv is complete when its marker file names the pinned version; a venv
without a matching marker (a build that was interrupted, or another version)
is removed and rebuilt. A file lock keeps two benches started at once from
building it twice.

synth-ai 0.2.17 does not depend on torch, but some of its dependencies could
pull it in; a constraint pins torch to the CPU wheel served locally, so an
unpinned resolution never downloads the CUDA build. The constraint only
applies if something asks for torch.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REFERENCE_VERSION = "0.2.17"
REFERENCE_REQUIREMENT = f"synth-ai=={REFERENCE_VERSION}"
# Applied with `pip -c`: pins torch (to the local CPU wheel) only if something pulls it.
CONSTRAINTS = ("torch==2.13.0",)

BENCH_DIR = Path(__file__).resolve().parent
CACHE_DIR = BENCH_DIR / ".cache"
VENV_DIR = CACHE_DIR / "ref-venv"
MARKER = VENV_DIR / "synth-ai-reference.json"
LOCK_FILE = CACHE_DIR / "ref-venv.lock"


def _log(message: str) -> None:
    print(f"[reference_env] {message}", file=sys.stderr, flush=True)


def venv_python(venv: Path = VENV_DIR) -> Path:
    """Path of the venv's interpreter (whether or not it exists yet)."""
    return venv / "bin" / "python"


def reference_cli(venv: Path = VENV_DIR) -> Path:
    """Path of the reference `synth-ai` console script (whether or not it exists yet)."""
    return venv / "bin" / "synth-ai"


def _read_marker(marker: Path = MARKER) -> dict | None:
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_ready(venv: Path = VENV_DIR) -> bool:
    """True when the venv holds a complete install of the pinned reference version."""
    marker = _read_marker(venv / MARKER.name)
    return (
        marker is not None
        and marker.get("version") == REFERENCE_VERSION
        and venv_python(venv).exists()
        and reference_cli(venv).exists()
    )


def _dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _clean_env() -> dict[str, str]:
    """Environment for pip and the reference tools: nothing of the current venv leaks in."""
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV", "PIP_USER"):
        env.pop(key, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def reference_env() -> dict[str, str]:
    """Environment to run the reference CLI with: the venv's bin first on PATH."""
    env = _clean_env()
    env["VIRTUAL_ENV"] = str(VENV_DIR)
    env["PATH"] = f"{VENV_DIR / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log(f"another process is building {VENV_DIR}; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# pip warns once per package for each configured local index that lacks it: noise, not news.
_PIP_NOISE = "is ignored: it is neither a file nor a directory"


def _run(cmd: list[str]) -> None:
    _log("$ " + " ".join(cmd))
    proc = subprocess.Popen(cmd, env=_clean_env(), stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if _PIP_NOISE not in line:
            sys.stderr.write(line)
    if proc.wait() != 0:
        raise RuntimeError(f"command failed with exit code {proc.returncode}: {' '.join(cmd)}")


def _base_python() -> str:
    """The interpreter to create the venv from: the current one (venv resolves its base)."""
    return sys.executable


def _build(venv: Path) -> dict:
    if venv.exists():
        _log(f"removing incomplete or outdated venv {venv}")
        shutil.rmtree(venv)
    started = time.monotonic()
    _log(f"creating venv {venv} (synth-ai {REFERENCE_VERSION} from PyPI; takes a few minutes)")
    _run([_base_python(), "-m", "venv", str(venv)])
    constraints = CACHE_DIR / "ref-constraints.txt"
    constraints.write_text("".join(line + "\n" for line in CONSTRAINTS))
    _run(
        [
            str(venv_python(venv)),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--progress-bar",
            "off",
            "-c",
            str(constraints),
            REFERENCE_REQUIREMENT,
        ]
    )
    if not reference_cli(venv).exists():
        raise RuntimeError(f"install finished but {reference_cli(venv)} is missing")
    torch_version = subprocess.run(
        [
            str(venv_python(venv)),
            "-c",
            "import importlib.metadata as m\n"
            "try: print(m.version('torch'))\n"
            "except m.PackageNotFoundError: print('')",
        ],
        env=_clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    seconds = round(time.monotonic() - started, 1)
    size = _dir_size(venv)
    info = {
        "version": REFERENCE_VERSION,
        "python": subprocess.run(
            [str(venv_python(venv)), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip(),
        "torch": torch_version or None,
        "build_seconds": seconds,
        "size_bytes": size,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    # Written last: its presence means the venv is complete.
    (venv / MARKER.name).write_text(json.dumps(info, indent=2) + "\n")
    _log(
        f"built in {seconds:.0f} s, {size / 2**20:.0f} MiB"
        + (f", torch {torch_version}" if torch_version else ", no torch")
    )
    return info


def ensure_reference_venv(*, rebuild: bool = False) -> Path:
    """Build ``bench/.cache/ref-venv`` with synth-ai 0.2.17 if needed; return its python."""
    if not rebuild and is_ready():
        return venv_python()
    with _locked():
        # Someone else may have finished the build while we waited for the lock.
        if rebuild or not is_ready():
            _build(VENV_DIR)
    return venv_python()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rebuild", action="store_true", help="remove and rebuild the venv")
    parser.add_argument("--info", action="store_true", help="print the marker (build time, size) as JSON")
    args = parser.parse_args(argv)
    try:
        python = ensure_reference_venv(rebuild=args.rebuild)
    except RuntimeError as exc:
        _log(f"error: {exc}")
        return 1
    if args.info:
        print(json.dumps(_read_marker(), indent=2))
    else:
        _log(f"ready: synth-ai {REFERENCE_VERSION} at {VENV_DIR}")
        print(python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
