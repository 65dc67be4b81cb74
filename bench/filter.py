"""Bench: `synth-ai filter` throughput and memory, ours against synth-ai 0.2.17.

Generates a traces v3 SQLite database of `--sessions` sessions (default 100,000; deterministic, cached under
bench/.cache/) shaped like math-app eval traces: metadata with split, task id, model, seed and a judge score; a
system, user and assistant message per session (a quarter of them with a second turn); one outcome reward each.
The rows are written with `executemany` in one transaction, so generating 100k sessions takes seconds.

Both sides run the same `[filter]` config (train split, official score >= 0.5, a judge minimum; about a third of
the sessions pass) as whole processes, start-up included, interleaved `--runs` times on a warm page cache; the best
run of each is compared. Sessions/s is sessions in the database divided by wall time. Our peak RSS (from `wait4`)
is also measured on a database a tenth the size, to show it does not grow with the database. The two outputs are
compared: they must be the same bytes. Ends with `filter: ours X sessions/s, baseline Y sessions/s, ratio Z`.

    python bench/filter.py                      # 100k sessions, 1 run each
    python bench/filter.py --sessions 20000 --runs 3
    python bench/filter.py --no-baseline
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
CACHE_DIR = BENCH_DIR / ".cache"
GENERATOR_VERSION = 1
sys.path.insert(0, str(REPO_ROOT / "src"))

CONFIG = """[filter]
db = "{db}"
output = "{output}"
splits = ["train"]
min_official_score = 0.5
min_judge_scores = {{ quality = 0.2 }}
"""


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def generate(path: Path, sessions: int, seed: int = 17) -> Path:
    """A trace DB with `sessions` sessions (cached: built once per size and generator version)."""
    if path.exists():
        return path
    from synth_ai.tracing.schema import ALL_STATEMENTS

    started = time.perf_counter()
    rng = random.Random(seed)
    temp = path.with_suffix(".partial")
    temp.unlink(missing_ok=True)
    conn = sqlite3.connect(temp)
    conn.execute("PRAGMA journal_mode=OFF")
    for statement in ALL_STATEMENTS:
        conn.execute(statement)
    session_rows, message_rows, outcome_rows = [], [], []
    base = 1_767_225_600  # 2026-01-01T00:00:00Z
    for i in range(sessions):
        sid = f"session_{i:08d}"
        created = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(base + i)) + f".{i % 1_000_000:06d}+00:00"
        a, b = rng.randint(1, 999), rng.randint(1, 999)
        correct = rng.random() < 0.6
        meta = {"task_split": "train" if rng.random() < 0.8 else "test", "task_id": f"math_single_step:{i}",
                "model": "Qwen/Qwen3-4B", "seed": i, "env_name": "math", "policy_name": "math-react",
                "judge_scores": {"quality": round(rng.random(), 3)}}
        turns = 2 if rng.random() < 0.25 else 1
        session_rows.append((sid, created, 1, 1, 1 + 2 * turns, json.dumps(meta, separators=(",", ":"))))
        message_rows.append((sid, "system", '{"role":"system","content":"Solve the problem. Put the final answer '
                             'in \\\\boxed{}."}', created))
        for turn in range(turns):
            question = f"What is ${a + turn} + {b}$? Show your reasoning briefly, then give the final answer."
            answer = f"{a + turn} plus {b} is {a + turn + b if correct else a + b - 1}. \\boxed{{{a + turn + b}}}"
            message_rows.append((sid, "user", json.dumps({"role": "user", "content": question}), created))
            message_rows.append((sid, "assistant", json.dumps({"role": "assistant", "content": answer}), created))
        outcome_rows.append((sid, 1 if correct else 0, 0, turns, created))
    with conn:
        conn.executemany("INSERT INTO session_traces (session_id, created_at, num_timesteps, num_events,"
                         " num_messages, metadata) VALUES (?, ?, ?, ?, ?, ?)", session_rows)
        conn.executemany("INSERT INTO messages (session_id, message_type, content, timestamp) VALUES (?, ?, ?, ?)",
                         message_rows)
        conn.executemany("INSERT INTO outcome_rewards (session_id, total_reward, achievements_count, total_steps,"
                         " created_at) VALUES (?, ?, ?, ?, ?)", outcome_rows)
    conn.close()
    temp.rename(path)
    log(f"generated {path.name}: {sessions:,} sessions, {path.stat().st_size / 2**20:.0f} MiB "
        f"in {time.perf_counter() - started:.1f}s")
    return path


def ours_command() -> list[str]:
    script = Path(sys.executable).parent / "synth-ai"
    return [str(script)] if script.exists() else [sys.executable, "-m", "synth_ai"]


def run_filter(command: list[str], db: Path, output: Path, work: Path, env: dict[str, str]) -> tuple[float, int, str]:
    """(wall seconds, peak RSS KiB, combined output) of one whole filter process."""
    config = work / f"filter_{output.stem}.toml"
    config.write_text(CONFIG.format(db=db, output=output))
    started = time.perf_counter()
    proc = subprocess.Popen([*command, "filter", "--config", str(config)], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    text = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} filter failed ({proc.returncode}):\n{text[-3000:]}")
    return seconds, usage.ru_maxrss, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--generate", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        generate(Path(args.generate), args.sessions)
        return

    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    big = CACHE_DIR / f"filter_traces_{args.sessions}_v{GENERATOR_VERSION}.db"
    small_n = max(1, args.sessions // 10)
    small = CACHE_DIR / f"filter_traces_{small_n}_v{GENERATOR_VERSION}.db"
    for path, count in ((big, args.sessions), (small, small_n)):
        # in a child process: a forked child's peak RSS counts the parent's pages, so the parent stays small
        if not path.exists():
            subprocess.run([sys.executable, __file__, "--generate", str(path), "--sessions", str(count)], check=True)
    with tempfile.TemporaryDirectory(prefix="bench-filter-") as tmp:
        work = Path(tmp)
        env = dict(os.environ, HOME=str(work), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        baseline_cmd = None
        if not args.no_baseline:
            sys.path.insert(0, str(BENCH_DIR))
            from reference_env import ensure_reference_venv, reference_cli

            ensure_reference_venv()
            baseline_cmd = [str(reference_cli())]
        ours_times, base_times, rss = [], [], {}
        for run in range(args.runs):
            seconds, peak, _ = run_filter(ours_command(), big, work / "ours.jsonl", work, env)
            ours_times.append(seconds)
            rss["big"] = max(rss.get("big", 0), peak)
            log(f"run {run + 1}: ours {seconds:.2f}s ({args.sessions / seconds:,.0f} sessions/s), "
                f"peak RSS {peak / 1024:.0f} MiB")
            if baseline_cmd is not None:
                seconds, peak, _ = run_filter(baseline_cmd, big, work / "reference.jsonl", work, env)
                base_times.append(seconds)
                log(f"run {run + 1}: baseline {seconds:.2f}s ({args.sessions / seconds:,.0f} sessions/s), "
                    f"peak RSS {peak / 1024:.0f} MiB")
        _, rss["small"], _ = run_filter(ours_command(), small, work / "ours_small.jsonl", work, env)
        written = sum(1 for _ in (work / "ours.jsonl").open())
        print(f"examples written: {written:,} of {args.sessions:,} sessions")
        print(f"ours peak RSS: {rss['small'] / 1024:.0f} MiB at {small_n:,} sessions "
              f"({small.stat().st_size / 2**20:.0f} MiB DB), {rss['big'] / 1024:.0f} MiB at {args.sessions:,} "
              f"sessions ({big.stat().st_size / 2**20:.0f} MiB DB)")
        ours_rate = args.sessions / min(ours_times)
        if baseline_cmd is None:
            print(f"filter: ours {ours_rate:.0f} sessions/s, baseline n/a, ratio n/a")
            return
        same = (work / "ours.jsonl").read_bytes() == (work / "reference.jsonl").read_bytes()
        print(f"outputs identical: {same}")
        base_rate = args.sessions / min(base_times)
        print(f"filter: ours {ours_rate:.0f} sessions/s, baseline {base_rate:.0f} sessions/s, "
              f"ratio {ours_rate / base_rate:.2f}")


if __name__ == "__main__":
    main()
