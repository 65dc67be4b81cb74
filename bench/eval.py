"""Eval bench: `synth-ai eval` rollouts per second at concurrency 16 on the math task app, ours against 0.2.17.

Each side runs its own CLI's `eval` as a whole process (start-up included: that is what a user waits for), with the
math app discovered and run in-process, on one generated offline dataset (`What is $A + B$?` problems, through
`MATH_DATASET_LOCAL_DIR`) and the instant model of `bench/rollout.py` (a bare asyncio HTTP server in its own process
answering every chat completion at once with the right `math_submit` call). Ours runs the bundled math app and
stores every rollout in a traces v3 SQLite file; the baseline runs the math app its wheel installs (found through
`SYNTH_TASK_APP_SEARCH_PATH`) with `--trace-db none`, because 0.2.17's eval cannot store that app's compact traces
(it aborts; see the reference's quirks), so ours does more work per rollout.

Both read the same eval TOML (`[eval]`: app, model, seeds `0-(N-1)`, `concurrency = 16`, the instant model's
`inference_url`). A seed counts when its rollout scored 1.0 (ours: the JSON summary; the baseline: its
`seed=N status=200 mean_return=1.0` lines). Rounds alternate ours and the baseline; the median over rounds of
counted rollouts / wall seconds is reported, with the CPU seconds each eval process used per rollout (from its
rusage, steadier than wall time on a loaded machine). The last line is

    eval: ours X rollouts/s, baseline Y rollouts/s, ratio Z

with Z = X / Y (target: >= 3). Reproduce from the repository root:

    python bench/eval.py            # --seeds 200 --concurrency 16 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
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
from rollout import HOST, Server, _site_packages, base_env, free_port, wait_ready, write_dataset  # noqa: E402

APP_ID = "math-single-step"
REPO = Path(__file__).resolve().parent.parent
REFERENCE_OK = re.compile(r"^seed=(\d+) status=200 mean_return=1\.0\b", re.MULTILINE)


@dataclass
class Side:
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    rates: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)


def eval_config(path: Path, seeds: int, concurrency: int, model_url: str) -> Path:
    path.write_text("\n".join([
        "[eval]", f'app_id = "{APP_ID}"', 'model = "Qwen/Qwen3-0.6B"', f'seeds = "0-{seeds - 1}"',
        f"concurrency = {concurrency}", 'trace_format = "structured"', "return_trace = true", "",
        "[eval.policy_config]", f'inference_url = "{model_url}"', "max_llm_calls = 1", "max_tokens = 16", "",
    ]))
    return path


def our_side(root: Path, key: str, data_dir: Path, config: Path) -> Side:
    script = Path(sys.executable).with_name("synth-ai")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "synth_ai"]
    env = base_env(root / "home", key, data_dir, dict(os.environ))
    if not script.exists():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    argv += ["--json", "eval", APP_ID, "--config", str(config)]
    return Side("ours", argv, env, root / "ours")


def reference_side(root: Path, key: str, data_dir: Path, config: Path) -> Side:
    ensure_reference_venv()
    apps = _site_packages() / "examples" / "task_apps" / "math"
    env = base_env(root / "home", key, data_dir, reference_env())
    hf_cache = root / "hf-cache"
    env.update({"GROQ_API_KEY": "dummy", "SYNTH_TASK_APP_SEARCH_PATH": str(apps), "MATH_DATASET_CACHE_DIR":
                str(hf_cache), "HF_HOME": str(hf_cache), "HF_DATASETS_CACHE": str(hf_cache)})
    env_file = root / "reference.env"
    env_file.write_text(f"ENVIRONMENT_API_KEY={key}\n")
    argv = [str(reference_cli()), "eval", APP_ID, "--config", str(config), "--env-file", str(env_file),
            "--trace-db", "none"]
    return Side(f"baseline (synth-ai {REFERENCE_VERSION})", argv, env, root / "reference")


def run_once(side: Side, extra: list[str], timeout: float) -> tuple[float, float, str, int]:
    """(wall seconds, CPU seconds, stdout, exit code) of one eval process."""
    side.cwd.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen([*side.argv, *extra], cwd=side.cwd, env=side.env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err)
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text = out.read().decode(errors="replace")
        if proc.returncode != 0:
            text += "\n[stderr]\n" + err.read().decode(errors="replace")[-3000:]
    return wall, usage.ru_utime + usage.ru_stime, text, proc.returncode


def ours_ok(stdout: str) -> int:
    try:
        doc = json.loads(stdout)
    except ValueError:
        return 0
    return sum(1 for r in doc.get("results", []) if r.get("status") == "ok" and r.get("official_score") == 1.0)


def reference_ok(stdout: str) -> int:
    return len(set(REFERENCE_OK.findall(stdout)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200, help="seeds (rollouts) per eval run")
    parser.add_argument("--concurrency", type=int, default=16, help="rollouts in flight")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per side, alternating")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one eval run may take")
    parser.add_argument("--no-baseline", action="store_true", help="measure ours only")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.concurrency < 1 or args.rounds < 1:
        parser.error("--seeds, --concurrency and --rounds must be >= 1")
    print(f"reproduce: python bench/eval.py --seeds {args.seeds} --concurrency {args.concurrency} "
          f"--rounds {args.rounds}")
    root = Path(tempfile.mkdtemp(prefix="synth-eval-bench-"))
    key = "sk_env_bench_" + secrets.token_hex(16)
    data_dir = root / "data"
    write_dataset(data_dir)
    (root / "home").mkdir()
    model_port = free_port()
    model = Server("instant model", [sys.executable, str(Path(__file__).with_name("rollout.py")), "--serve-model",
                                     str(model_port)], base_env(root / "home", key, data_dir, dict(os.environ)),
                   root, root / "model.log", model_port)
    config = eval_config(root / "eval_bench.toml", args.seeds, args.concurrency, f"http://{HOST}:{model_port}/v1")
    sides = [our_side(root, key, data_dir, config)]
    if not args.no_baseline:
        sides.append(reference_side(root, key, data_dir, config))
    counters = {sides[0].name: ours_ok, **({sides[1].name: reference_ok} if len(sides) > 1 else {})}
    failed = False
    try:
        model.start()
        wait_ready(model, f"{model.base}/", {}, 20)
        for side in sides:
            print(f"  {side.name}: (cd {side.cwd} && {shlex.join(side.argv)})")
        for round_no in range(args.rounds):
            for side in sides:
                extra = ["--trace-db", str(root / f"ours-{round_no}.db")] if side is sides[0] else []
                wall, cpu, stdout, code = run_once(side, extra, args.timeout)
                ok = counters[side.name](stdout)
                side.rates.append(ok / wall)
                side.walls.append(wall)
                side.cpu_ms.append(cpu / args.seeds * 1000)
                print(f"  round {round_no + 1} {side.name}: {ok}/{args.seeds} scored 1.0 in {wall:.2f} s = "
                      f"{ok / wall:.1f} rollouts/s, {cpu / args.seeds * 1000:.1f} CPU ms/rollout (exit {code})")
                if ok < args.seeds:
                    print(f"    not every seed counted; output tail:\n{stdout[-1500:]}", file=sys.stderr)
                    failed = True
    finally:
        model.stop()
        if args.keep or failed:
            print(f"  files kept in {root}")
        else:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    print(f"\n{args.seeds} seeds x {args.rounds} rounds at concurrency {args.concurrency}, whole processes:")
    for side in sides:
        print(f"  {side.name}: median {statistics.median(side.rates):.1f} rollouts/s (rounds: "
              + ", ".join(f"{r:.1f}" for r in side.rates) + f"), median wall {statistics.median(side.walls):.1f} s,"
              f" {statistics.median(side.cpu_ms):.1f} CPU ms/rollout")
    ours = statistics.median(sides[0].rates)
    if len(sides) < 2:
        print(f"eval: ours {ours:.1f} rollouts/s, baseline n/a (--no-baseline)")
        return 1 if failed else 0
    base = statistics.median(sides[1].rates)
    if ours == 0 or base == 0:
        print("eval: failed (a side completed no rollout)")
        return 1
    ratio = ours / base
    print(f"\ntarget ratio >= 3: {'met' if ratio >= 3 else 'NOT met'}")
    print(f"eval: ours {ours:.1f} rollouts/s, baseline {base:.1f} rollouts/s, ratio {ratio:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
