"""The reference baseline: synth-ai 0.2.17 from PyPI, in its own virtualenv.

Several benches and the compatibility tests compare us against the released package. They share one
virtualenv reached at ``bench/.cache/ref-venv`` (gitignored): a symlink to an entry of the set-up cache outside
the clone (``${SYNTH_CACHE_DIR:-~/.cache/synth-ai}/ref-venv-<key>``, scripts/setup_cache.py), so a new clone on
the same machine links to it in an instant instead of spending minutes installing it again:

    from reference_env import ensure_reference_venv   # with bench/ on sys.path
    python = ensure_reference_venv()                  # path of the venv's python
    cli = reference_cli()                             # its `synth-ai` script

Run as a script (``python bench/reference_env.py``) it builds or links the venv if needed, checks that it
imports (a broken one is rebuilt from scratch), and prints the venv's python path on stdout; progress goes to
stderr.

The entry's key is a hash of what defines it (the pinned version, the constraints, the Python); an entry whose
build was interrupted (no marker) is removed and rebuilt; a file lock keeps two processes from building it twice.

synth-ai 0.2.17 does not depend on torch, but some of its dependencies could
pull it in; a constraint pins torch to the CPU wheel served locally, so an
unpinned resolution never downloads the CUDA build. The constraint only
applies if something asks for torch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import setup_cache  # noqa: E402 - scripts/setup_cache.py, found through the line above

REFERENCE_VERSION = "0.2.17"
REFERENCE_REQUIREMENT = f"synth-ai=={REFERENCE_VERSION}"
# Applied with `pip -c`: pins torch (to the local CPU wheel) only if something pulls it.
CONSTRAINTS = ("torch==2.13.0",)

BENCH_DIR = Path(__file__).resolve().parent
CACHE_DIR = BENCH_DIR / ".cache"
VENV_DIR = CACHE_DIR / "ref-venv"  # a symlink to the set-up cache's entry
MARKER = VENV_DIR / "synth-ai-reference.json"
ENTRY_NAME = "ref-venv"
FORMAT = 1  # bump when _build changes what the venv holds


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


def _run(cmd: list[str], venv: Path) -> None:
    """Run a build step with its output in the entry's build log (a line every 30 s says it is still going)."""
    _log("$ " + " ".join(cmd))
    setup_cache.run_quietly(cmd, venv.parent / f"{venv.name}.build.log", env=_clean_env())


def _base_python() -> str:
    """The interpreter to create the venv from: the current one (venv resolves its base)."""
    return sys.executable


def definition() -> dict:
    return {"format": FORMAT, "requirement": REFERENCE_REQUIREMENT, "constraints": list(CONSTRAINTS),
            "python": setup_cache.python_identity()}


def _build(venv: Path) -> dict:
    started = time.monotonic()
    _log(f"creating venv {venv} (synth-ai {REFERENCE_VERSION} from PyPI; takes a few minutes)")
    _run([_base_python(), "-m", "venv", str(venv)], venv)
    constraints = venv.parent / f"{venv.name}.constraints.txt"
    constraints.write_text("".join(line + "\n" for line in CONSTRAINTS))
    _run(
        [
            str(venv_python(venv)),
            "-m",
            "pip",
            "install",
            "--progress-bar",
            "off",
            "-c",
            str(constraints),
            REFERENCE_REQUIREMENT,
        ],
        venv,
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


def imports_cleanly() -> bool:
    """The reference package imports in its venv (a venv can be complete on paper and broken on disk)."""
    result = subprocess.run([str(venv_python()), "-c", "import synth_ai"], env=_clean_env(), capture_output=True,
                            text=True)
    if result.returncode != 0:
        _log("the venv does not import synth_ai: " + (result.stderr.strip().splitlines() or ["?"])[-1])
    return result.returncode == 0


def ensure_reference_venv(*, rebuild: bool = False) -> Path:
    """Link ``bench/.cache/ref-venv`` to the cache's synth-ai 0.2.17 venv, built first if needed; its python."""
    entry = setup_cache.entry_path(ENTRY_NAME, definition())
    if not rebuild and VENV_DIR.resolve() == entry and is_ready() and setup_cache.is_complete(entry, definition()):
        return venv_python()
    with setup_cache.locked(entry):  # another process may be building it: this waits, then reuses its entry
        setup_cache.ensure_entry(ENTRY_NAME, definition(), _build, rebuild=rebuild)
    setup_cache.link_entry(VENV_DIR, entry)
    return venv_python()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rebuild", action="store_true", help="remove and rebuild the venv")
    parser.add_argument("--info", action="store_true", help="print the marker (build time, size) as JSON")
    args = parser.parse_args(argv)
    try:
        python = ensure_reference_venv(rebuild=args.rebuild)
        if not imports_cleanly():
            _log("rebuilding it from scratch")
            python = ensure_reference_venv(rebuild=True)
    except (RuntimeError, OSError) as exc:
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
