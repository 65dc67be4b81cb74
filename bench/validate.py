"""Bench: SFT dataset validation speed and memory, ours against synth-ai 0.2.17.

Generates a ~300 MB JSONL of SFT records with image data URLs (deterministic, cached under bench/.cache/), then
times:

- ours, whole process: `synth-ai files validate FILE --json` (start-up and imports included: the console entry
  takes its short path, `synth_ai.cli.quick_validate`), MB/s and the child's peak RSS (from `wait4`); also on a file
  a tenth the size, to show the peak RSS does not grow with it;
- ours, in process: `validate_jsonl(path, workers=0)` (what that command runs, both CPUs for a large file) timed
  inside a long-lived process of our venv, imports excluded, exactly as the baseline is timed;
- baseline: synth-ai 0.2.17's `validate_sft_jsonl(path)` timed inside its own process, with its multi-second
  import excluded, in the reference venv that `bench/reference_env.py` builds (bench/.cache/ref-venv).

The sides run interleaved (ours, baseline, ours, ...) on a warm page cache, `--runs` times each, so all see the
same machine load; the best run of each is compared (the median is printed too), and CPU seconds are shown as a
load-independent check. Ends with `validate: ours X MB/s, baseline Y MB/s, ratio Z`, ours being the whole process
(our start-up counted, the baseline's 10 s import not), or with `--in-process` the in-process figure (both sides
timed the same way; our start-up, ~0.04 s of CPU on a loaded machine, is still a large part of a 60 MB file's time).

    python bench/validate.py                 # ~300 MB of crafter-style records, 5 runs each
    python bench/validate.py --mix screens   # larger images
    python bench/validate.py --size-mb 50 --runs 1 --no-baseline
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
CACHE_DIR = BENCH_DIR / ".cache"
GENERATOR_VERSION = 3

# The baseline runs in one long-lived process (its multi-second import paid once, outside the timings): each
# "run" line on stdin validates the file once and answers one JSON line. That lets the bench interleave the two
# sides run by run, so both see the same machine load.
_SERVER = r"""
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
IMPORT
imported = time.perf_counter() - t0
print(json.dumps({"ready": True, "import_seconds": imported}), flush=True)
for command in sys.stdin:
    path = Path(command.strip())
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    c0, t1 = time.process_time() + kids.ru_utime + kids.ru_stime, time.perf_counter()
    CALL
    seconds = time.perf_counter() - t1
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() + kids.ru_utime + kids.ru_stime - c0
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "rss_before_kb": rss_before,
                      "rss_peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}), flush=True)
"""
_BASELINE_SERVER = _SERVER.replace("IMPORT", "from synth_ai.api.train.utils import validate_sft_jsonl").replace(
    "CALL", "validate_sft_jsonl(path)")
# The same loop around our library call, as `synth-ai files validate` makes it (one process per CPU for big files).
_OURS_SERVER = _SERVER.replace("IMPORT", "from synth_ai.datasets import validate_jsonl").replace(
    "CALL", "report = validate_jsonl(path, sha256=False, workers=0)\n    assert report.ok, report.errors[:3]")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- data -----------------------------------------------------------------------------------------------------

MIXES = {
    # One decision per record: system, observation (text + one 64x64 frame: 1-6 KB), answer or tool call.
    "frames": (1_000, 6_000),
    # Multi-turn episodes: 3-6 steps of observation + frame, tool call, tool result, then a final answer.
    "episodes": (1_000, 6_000),
    # Screenshot-style: one larger image (20-400 KB) per record.
    "screens": (20_000, 400_000),
}


def _image_pool(rng: random.Random, sizes: tuple[int, int]) -> list[tuple[str, str]]:
    """Distinct fake images (real headers, random bodies) as (mime, base64)."""
    headers = {
        "image/png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
        "image/jpeg": b"\xff\xd8\xff\xe0\x00\x10JFIF\x00",
        "image/webp": b"RIFF\x00\x00\x00\x00WEBPVP8 ",
    }
    pool = []
    for k in range(48):
        mime = list(headers)[k % 3]
        body = headers[mime] + rng.randbytes(rng.randint(*sizes))
        pool.append((mime, base64.b64encode(body).decode("ascii")))
    return pool


_WORDS = ["the", "agent", "moves", "left", "toward", "tree", "collect", "wood", "stone", "craft", "table", "then",
          "sapling", "water", "drink", "place", "pickaxe", "zombie", "health", "food"]


def _episode(rng: random.Random, pool: list[tuple[str, str]]) -> dict:
    def text(n: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(n))

    messages: list[dict] = [{"role": "system", "content": "You are an agent playing Crafter. " + text(40)}]
    for step in range(rng.randint(3, 6)):
        mime, b64 = rng.choice(pool)
        call_id = f"call_{step}_{rng.randint(0, 10**6)}"
        messages += [
            {"role": "user", "content": [{"type": "text", "text": text(rng.randint(10, 40))},
                                         {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{b64}"}}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "interact", "arguments": json.dumps({"actions": [text(1), text(1)]})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": text(rng.randint(5, 20))},
        ]
    messages.append({"role": "assistant", "content": text(rng.randint(5, 30))})
    return {"messages": messages, "tools": [{"name": "interact", "description": text(8),
                                             "parameters": {"type": "object", "properties": {}}}],
            "metadata": {"seed": rng.randint(0, 10_000), "env": "crafter"}}


def _record(rng: random.Random, pool: list[tuple[str, str]]) -> dict:
    def text(n: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(n))

    system = {"role": "system", "content": "You are an agent playing Crafter. " + text(40)}
    call = {"id": f"call_{rng.randint(0, 10**6)}", "type": "function",
            "function": {"name": "interact", "arguments": json.dumps({"actions": [text(1), text(1)]})}}
    if rng.random() < 0.85:  # vision: observation text + frame, then a tool call or a short answer
        mime, b64 = rng.choice(pool)
        user = {"role": "user", "content": [
            {"type": "text", "text": text(rng.randint(10, 40))},
            {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{b64}"}},
        ]}
        answer = ({"role": "assistant", "content": None, "tool_calls": [call]} if rng.random() < 0.6
                  else {"role": "assistant", "content": text(rng.randint(5, 30))})
        return {"messages": [system, user, answer], "metadata": {"seed": rng.randint(0, 10_000), "env": "crafter"}}
    return {  # text only, with a tool round trip
        "messages": [
            system,
            {"role": "user", "content": text(rng.randint(20, 120))},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": text(20)},
            {"role": "assistant", "content": text(rng.randint(5, 40))},
        ],
        # The flat tool shape: the only one synth-ai 0.2.17 accepts (ours also takes {"type", "function"}).
        "tools": [{"name": "interact", "description": text(8), "parameters": {"type": "object", "properties": {}}}],
    }


def generate(size_mb: int, mix: str, cache_dir: Path) -> Path:
    path = cache_dir / f"validate-sft-{mix}-{size_mb}mb-v{GENERATOR_VERSION}.jsonl"
    if path.exists():
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    log(f"generating {path} (~{size_mb} MB, {mix})")
    rng = random.Random(1234)
    pool = _image_pool(rng, MIXES[mix])
    make = _episode if mix == "episodes" else _record
    target = size_mb * 1_000_000
    tmp = path.with_suffix(".tmp")
    written = 0
    with open(tmp, "w", encoding="utf-8") as fh:
        while written < target:
            line = json.dumps(make(rng, pool)) + "\n"
            fh.write(line)
            written += len(line)
    tmp.replace(path)
    return path


# --- timing ---------------------------------------------------------------------------------------------------

def _run_child(cmd: list[str]) -> tuple[float, float, int, str]:
    """Run a process; return (wall seconds, CPU seconds, peak RSS in KiB, stdout). CPU and RSS come from `wait4`:
    the process and the workers it reaped (RSS is the largest single process)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{err.decode()[-2000:]}\n{out.decode()[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, out.decode()


def peak_rss_kb(cmd: list[str]) -> tuple[int, str]:
    """Peak RSS of a process, in KiB, and how it was taken. `wait4`'s figure would not do: Linux carries the
    launching process's peak across `exec` (this bench's own ~30 MiB), so GNU time, a small launcher, measures it
    where installed."""
    if os.path.exists("/usr/bin/time"):
        done = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True)
        if done.returncode == 0:
            return int(done.stderr.strip().splitlines()[-1]), "GNU time"
    return _run_child(cmd)[2], "wait4, the bench's own RSS included"


def our_command(path: Path, *extra: str) -> list[str]:
    script = Path(sys.executable).parent / "synth-ai"
    found = str(script) if script.exists() else shutil.which("synth-ai")
    if found is None:
        raise SystemExit("the synth-ai console script is not installed in this environment (pip install -e .)")
    return [found, "files", "validate", str(path), "--json", *extra]


def run_ours(path: Path, *extra: str) -> dict:
    seconds, cpu, rss, out = _run_child(our_command(path, *extra))
    doc = json.loads(out)
    if not doc.get("ok"):
        raise RuntimeError(f"our validator rejected the bench file: {doc.get('errors')[:3]}")
    return {"seconds": seconds, "cpu_seconds": cpu, "rss_kb": rss}


class InProcess:
    """A validator in its own long-lived process, imported once; `run()` validates the file once inside it."""

    def __init__(self, python: str, code: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([python, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env)
        self.import_seconds = self._answer()["import_seconds"]

    def _answer(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # the reference prints banners of its own on stdout
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"the baseline process ended (exit code {self.proc.wait()})")

    def run(self, path: Path) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()
        doc = self._answer()
        doc["rss_growth_kb"] = doc["rss_peak_kb"] - doc["rss_before_kb"]
        return doc

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def baseline_process() -> InProcess:
    """synth-ai 0.2.17's validator in the reference venv."""
    sys.path.insert(0, str(BENCH_DIR))
    try:
        from reference_env import ensure_reference_venv, reference_env
    finally:
        sys.path.pop(0)
    return InProcess(str(ensure_reference_venv()), _BASELINE_SERVER, reference_env())


def head_file(path: Path, fraction: float, cache_dir: Path) -> Path:
    """The first `fraction` of `path`'s lines (by bytes), cached in `cache_dir`."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    small = cache_dir / (path.stem + f".head{int(fraction * 100)}pct.jsonl")
    if small.exists():
        return small
    limit = int(path.stat().st_size * fraction)
    with open(path, "rb") as src, open(small, "wb") as dst:
        written = 0
        for line in src:
            if written >= limit:
                break
            dst.write(line)
            written += len(line)
    return small


def warm(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def _best(runs: list[dict], key: str = "seconds") -> float:
    return min(r[key] for r in runs)


def _median(runs: list[dict], key: str = "seconds") -> float:
    return statistics.median(r[key] for r in runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="SFT JSONL validation: ours vs synth-ai 0.2.17")
    parser.add_argument("--size-mb", type=int, default=300, help="size of the generated JSONL (default 300)")
    parser.add_argument("--mix", choices=sorted(MIXES), default="frames",
                        help="frames (default): one step per record, a 1-6 KB frame; episodes: multi-turn records, a "
                        "frame per step; screens: one 20-400 KB image per record")
    parser.add_argument("--runs", type=int, default=5, help="interleaved runs per side (default 5)")
    parser.add_argument("--no-baseline", action="store_true", help="time ours only")
    parser.add_argument("--file", type=Path, help="bench this JSONL instead of a generated one")
    parser.add_argument("--in-process", action="store_true",
                        help="end with the in-process comparison (both sides' imports excluded) instead of ours as a "
                        "whole process")
    parser.add_argument("--cache-dir", type=Path, default=CACHE_DIR)
    args = parser.parse_args(argv)

    path = args.file.resolve() if args.file else generate(args.size_mb, args.mix, args.cache_dir)
    mb = path.stat().st_size / 1e6
    small = head_file(path, 0.1, args.cache_dir)
    for p in (path, small):
        warm(p)
    with open(path, "rb") as fh:
        records = sum(1 for _ in fh)
    print(f"file: {path.name}: {mb:.1f} MB, {records:,} records ({'given' if args.file else args.mix}); "
          f"{os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f}")

    # Byte-compile our package first, as installing a wheel does: with PYTHONDONTWRITEBYTECODE set (as on this
    # project's machines) an editable checkout would otherwise recompile its modules on every start.
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "src" / "synth_ai"), quiet=1)
    tiny = args.cache_dir / "validate-one-record.jsonl"
    tiny.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    startup = sorted(run_ours(tiny)["cpu_seconds"] for _ in range(7))
    print(f"start-up: `synth-ai files validate --json` on a one-record file: CPU median {startup[3]:.3f} s, "
          f"best {startup[0]:.3f} s")

    baseline = None if args.no_baseline else baseline_process()
    ours_lib = InProcess(sys.executable, _OURS_SERVER)
    ours: list[dict] = []
    single: list[dict] = []
    lib: list[dict] = []
    base: list[dict] = []
    try:
        for _ in range(args.runs):  # interleaved, so that both sides see the same machine load
            ours.append(run_ours(path))
            single.append(run_ours(path, "--workers", "1"))
            lib.append(ours_lib.run(path))
            if baseline is not None:
                base.append(baseline.run(path))
    finally:
        ours_lib.close()
        if baseline is not None:
            baseline.close()
    rss_head = min(peak_rss_kb(our_command(small))[0] for _ in range(2))
    rss_full, rss_how = peak_rss_kb(our_command(path))
    hashed = run_ours(path, "--sha256")

    ours_rate = mb / _best(ours)
    print(f"ours:     `synth-ai files validate --json`, whole process: best {_best(ours):.3f} s = {ours_rate:.0f} MB/s "
          f"(median {mb / _median(ours):.0f} MB/s), CPU {_best(ours, 'cpu_seconds'):.2f} s; peak RSS "
          f"{rss_full / 1024:.1f} MiB ({rss_head / 1024:.1f} MiB on the {small.stat().st_size / 1e6:.0f} MB head; "
          f"{rss_how})")
    print(f"          --workers 1: best {mb / _best(single):.0f} MB/s, CPU {_best(single, 'cpu_seconds'):.2f} s; "
          f"--sha256: {mb / hashed['seconds']:.0f} MB/s")
    lib_rate = mb / _best(lib)
    print(f"ours:     validate_jsonl(workers=0) in process, import ({ours_lib.import_seconds:.2f} s) excluded: best "
          f"{_best(lib):.3f} s = {lib_rate:.0f} MB/s (median {mb / _median(lib):.0f} MB/s), CPU (its forked "
          f"workers included) {_best(lib, 'cpu_seconds'):.2f} s; RSS growth "
          f"{max(r['rss_growth_kb'] for r in lib) / 1024:.1f} MiB")
    rel = os.path.relpath(Path(__file__).resolve(), Path.cwd())
    source = f"--file {args.file}" if args.file else f"--size-mb {args.size_mb} --mix {args.mix}"
    print(f"reproduce: python {rel} {source} --runs {args.runs}" + (" --no-baseline" if args.no_baseline else "")
          + (" --in-process" if args.in_process else ""))
    if baseline is None:
        print(f"validate: ours {ours_rate:.0f} MB/s, baseline (skipped)")
        return 0
    base_rate = mb / _best(base)
    print(f"baseline: synth-ai 0.2.17 validate_sft_jsonl in process, import ({baseline.import_seconds:.1f} s) "
          f"excluded: best {_best(base):.3f} s = {base_rate:.0f} MB/s (median {mb / _median(base):.0f} MB/s), "
          f"CPU {_best(base, 'cpu_seconds'):.2f} s; RSS growth while validating "
          f"{max(r['rss_growth_kb'] for r in base) / 1024:.1f} MiB")
    print(f"          CPU: baseline {_best(base, 'cpu_seconds'):.2f} s (validation only) vs ours "
          f"{_best(ours, 'cpu_seconds'):.2f} s (whole process, workers included): "
          f"ratio {_best(base, 'cpu_seconds') / _best(ours, 'cpu_seconds'):.2f}")
    print(f"          in process, both sides' imports excluded: ours {lib_rate:.0f} MB/s, "
          f"baseline {base_rate:.0f} MB/s, "
          f"ratio {lib_rate / base_rate:.2f} (medians: ratio {_median(base) / _median(lib):.2f})")
    print(f"          load average at the end {os.getloadavg()[0]:.1f}")
    headline = lib_rate if args.in_process else ours_rate
    print(f"validate: ours {headline:.0f} MB/s, baseline {base_rate:.0f} MB/s, ratio {headline / base_rate:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
