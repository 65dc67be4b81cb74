"""Startup bench: wall time of `synth-ai --help` and `synth-ai train --help`, ours against 0.2.17.

Ours is the `synth-ai` console script next to the running interpreter (else `python -m synth_ai`);
the baseline is synth-ai 0.2.17 from PyPI in `bench/.cache/ref-venv` (built on first use, a few
minutes; see reference_env.py). Each command runs once to warm up, then --runs times, ours and the
baseline interleaved, from an empty temporary directory. A command that exits non-zero (or prints
no usage text) is reported and not timed. The last line is

    startup: ours X s, baseline Y s, ratio Z

with X and Y the medians, over the runs, of the mean time of the two commands in each run, and
Z = X / Y (target: <= 0.05). Per-command medians are printed above it.

Reproduce from the repository root:

    python bench/startup.py            # --runs 7 --warmup 1 by default
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference_env import REFERENCE_VERSION, ensure_reference_venv, reference_cli, reference_env  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
COMMANDS: tuple[tuple[str, ...], ...] = (("--help",), ("train", "--help"))
# What `--help` must never import (issue 2): the ML stack and the servers.
FORBIDDEN = ("torch", "transformers", "peft", "modal", "fastapi", "uvicorn")


class CommandFailed(Exception):
    pass


@dataclass
class Impl:
    name: str
    argv: list[str]
    env: dict[str, str]
    samples: dict[tuple[str, ...], list[float]] = field(default_factory=dict)

    def display(self, args: tuple[str, ...]) -> str:
        return shlex.join([*self.argv, *args])


def ours() -> Impl:
    env = dict(os.environ)
    script = Path(sys.executable).with_name("synth-ai")
    if script.exists():
        return Impl("ours", [str(script)], env)
    # Not installed as a console script: run the package, from the source tree if need be.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    return Impl("ours", [sys.executable, "-m", "synth_ai"], env)


def baseline() -> Impl:
    ensure_reference_venv()
    return Impl(f"baseline (synth-ai {REFERENCE_VERSION})", [str(reference_cli())], reference_env())


def run_once(impl: Impl, args: tuple[str, ...], cwd: str) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        [*impl.argv, *args], cwd=cwd, env=impl.env, stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0 or "usage" not in result.stdout.lower():
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        why = f"exited {result.returncode}" if result.returncode else "printed no usage text"
        raise CommandFailed(f"{impl.name}: `{impl.display(args)}` {why}:\n{tail}")
    return elapsed


def forbidden_imports(impl: Impl, args: tuple[str, ...], cwd: str) -> tuple[list[str], list[tuple[int, str]]]:
    """Forbidden top-level modules that `ours args` imports, and its slowest imports (cumulative us)."""
    if impl.argv[0] == sys.executable:  # python -m synth_ai
        cmd = [sys.executable, "-X", "importtime", *impl.argv[1:], *args]
    else:  # the console script is a Python file: run it under this interpreter
        cmd = [sys.executable, "-X", "importtime", impl.argv[0], *args]
    result = subprocess.run(cmd, cwd=cwd, env=impl.env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    found: set[str] = set()
    timings: list[tuple[int, str]] = []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _self, cumulative, name = (part.strip() for part in line.split(":", 1)[1].split("|"))
        if not cumulative.isdigit():
            continue  # the header line
        timings.append((int(cumulative), name))
        if name.split(".")[0] in FORBIDDEN:
            found.add(name.split(".")[0])
    return sorted(found), sorted(timings, reverse=True)[:5]


def combined_median(impl: Impl) -> float:
    """Median over rounds of the mean of both commands' times in that round.

    Pooling the raw samples instead would put the median on the edge between the two
    commands' clusters (with 7 runs each, it is the mean of the slowest `--help` and the
    fastest `train --help`); per-round means keep both commands' weight and stay stable.
    """
    rounds = zip(*(impl.samples[command] for command in COMMANDS))
    return statistics.median(statistics.fmean(times) for times in rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per command and implementation")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs first")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be >= 1 and --warmup >= 0")

    impls = [ours(), baseline()]
    print(f"reproduce: python bench/startup.py --runs {args.runs} --warmup {args.warmup}")
    for impl in impls:
        for command in COMMANDS:
            print(f"  {impl.name}: {impl.display(command)}")

    with tempfile.TemporaryDirectory(prefix="synth-startup-") as cwd:
        try:
            for impl in impls:
                for command in COMMANDS:
                    for _ in range(args.warmup):
                        run_once(impl, command, cwd)
                    impl.samples[command] = []
            for _ in range(args.runs):  # interleaved, so drift in machine load hits both alike
                for command in COMMANDS:
                    for impl in impls:
                        impl.samples[command].append(run_once(impl, command, cwd))
        except CommandFailed as exc:
            print(f"error: {exc}", file=sys.stderr)
            print("startup: failed (a command exited with an error; nothing was timed)")
            return 1

        print(f"\nmedian wall time over {args.runs} runs (after {args.warmup} warm-up):")
        for command in COMMANDS:
            label = "synth-ai " + " ".join(command)
            cells = ", ".join(f"{impl.name} {statistics.median(impl.samples[command]):.3f} s" for impl in impls)
            print(f"  {label:<24} {cells}")

        print("\nforbidden modules imported by ours (torch, transformers, peft, modal, fastapi, uvicorn):")
        for command in COMMANDS:
            found, slowest = forbidden_imports(impls[0], command, cwd)
            print(f"  synth-ai {' '.join(command)}: {', '.join(found) if found else 'none'}")
            if slowest:
                top = ", ".join(f"{name} {us / 1000:.0f} ms" for us, name in slowest[:3])
                print(f"    slowest imports (cumulative): {top}")

    ours_median, base_median = (combined_median(impl) for impl in impls)
    ratio = ours_median / base_median
    print(f"\ntarget ratio <= 0.05: {'met' if ratio <= 0.05 else 'NOT met'}")
    print(f"startup: ours {ours_median:.3f} s, baseline {base_median:.3f} s, ratio {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
