"""tinker-cookbook's client venv: the Tinker SDK and tinker-cookbook, as a user's training script has them.

The cookbook is a client of the Tinker API, and it pins transformers <= 5.5.4 where the backend needs 5.19, so it
gets its own virtualenv (`bench/.cache/cookbook-venv`, a link to an entry of the set-up cache outside the clone,
as the reference venv: `scripts/setup_cache.py`). `tests/test_tinker_cookbook.py` runs the cookbook's own
supervised and RL loops from it against a real backend. torch is pinned to the local CPU wheel in the same install
(the cookbook imports it; unpinned, pip would fetch the CUDA build).

    python bench/cookbook_env.py      # builds or links it; prints its python
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import setup_cache  # noqa: E402 - scripts/setup_cache.py, found through the line above
from reference_env import _clean_env  # noqa: E402 - bench/ is this script's folder: pip's clean environment

REQUIREMENTS = ("tinker==0.38.0", "tinker-cookbook==0.5.8", "torch==2.13.0")
CACHE_DIR = Path(__file__).resolve().parent / ".cache"
VENV_DIR = CACHE_DIR / "cookbook-venv"
ENTRY_NAME = "cookbook-venv"
FORMAT = 1  # bump when _build changes what the venv holds
CHECK = "import tinker, tinker_cookbook.supervised.train, tinker_cookbook.rl.train"


def definition() -> dict:
    return {"format": FORMAT, "requirements": list(REQUIREMENTS), "python": setup_cache.python_identity()}


def _build(venv: Path) -> None:
    log = venv.parent / f"{venv.name}.build.log"
    setup_cache.log(f"creating {venv} (tinker-cookbook and torch; a few minutes the first time)")
    setup_cache.run_quietly([sys.executable, "-m", "venv", str(venv)], log, env=_clean_env())
    setup_cache.run_quietly([str(venv / "bin" / "python"), "-m", "pip", "install", "--progress-bar", "off",
                             *REQUIREMENTS], log, env=_clean_env())


def _imports(python: Path) -> bool:
    env = {**_clean_env(), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(python), "-c", CHECK], env=env, capture_output=True).returncode == 0


def ensure_cookbook_venv(*, rebuild: bool = False) -> Path:
    """Link `bench/.cache/cookbook-venv` to the cache's entry, built first if needed; its python."""
    entry = setup_cache.entry_path(ENTRY_NAME, definition())
    with setup_cache.locked(entry):
        setup_cache.ensure_entry(ENTRY_NAME, definition(), _build, rebuild=rebuild)
    setup_cache.link_entry(VENV_DIR, entry)
    return VENV_DIR / "bin" / "python"


def main() -> int:
    try:
        python = ensure_cookbook_venv()
        if not _imports(python):
            setup_cache.log("the cookbook venv does not import; rebuilding it from scratch")
            python = ensure_cookbook_venv(rebuild=True)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        setup_cache.log(f"error: {exc}")
        return 1
    print(python)
    return 0 if _imports(python) else 1


if __name__ == "__main__":
    raise SystemExit(main())
