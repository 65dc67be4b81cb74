"""Rollout bench: `/rollout` requests per second of the math task app at concurrency 32, ours against 0.2.17.

Both sides serve `math-single-step` with their own CLI on 127.0.0.1, tracing on for both (`--trace DIR
--trace-db PATH`; the reference needs the flags to start without prompts, and ours then really records each
rollout in SQLite and an SFT JSONL file, while the reference's math app only adds a summary dict). Both read the
same generated offline dataset through `MATH_DATASET_LOCAL_DIR` (problems `What is $A + B$?`). The policy model
is an instant OpenAI-compatible endpoint started here in its own process (a bare asyncio HTTP server): it answers
every chat completion at once with a `math_submit` tool call carrying the right sum, so a rollout that went
through the model scores 1.0.

The baseline is synth-ai 0.2.17 from PyPI in `bench/.cache/ref-venv` (built on first use, a few minutes; see
reference_env.py), serving the math app that its wheel installs under `site-packages/examples/task_apps/math`.

Each side gets --warmup untimed rollouts, then --requests timed ones at --concurrency, per round; rounds
alternate ours and the baseline (both servers stay up, only the one measured gets traffic). A request counts
only when it answers 200 with a reward of 1.0; the rate is counted requests over the round's wall time, and the
median over rounds is reported. The last line is

    rollout: ours X req/s, baseline Y req/s, ratio Z

with Z = X / Y (target: >= 2). Reproduce from the repository root:

    python bench/rollout.py            # --requests 600 --concurrency 32 --warmup 64 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference_env import (  # noqa: E402
    REFERENCE_VERSION,
    VENV_DIR,
    ensure_reference_venv,
    reference_cli,
    reference_env,
)

REPO = Path(__file__).resolve().parent.parent
APP_ID = "math-single-step"
HOST = "127.0.0.1"
TRAIN_ROWS = 200
TEST_ROWS = 50
# Environment variables neither server may see: keys that could make a CLI call a backend, and search paths.
DROPPED_ENV = (
    "SYNTH_API_KEY",
    "OPENAI_API_KEY",
    "GROQ_API_KEY",
    "ENVIRONMENT_API_KEY",
    "DEV_ENVIRONMENT_API_KEY",
    "ENVIRONMENT_API_KEY_ALIASES",
    "SYNTH_TASK_APP_SEARCH_PATH",
    "TASKAPP_TRACING_ENABLED",
    "TURSO_LOCAL_DB_URL",
    "SQLD_DB_PATH",
    "BACKEND_BASE_URL",
    "SYNTH_BASE_URL",
)
PROBLEM = re.compile(r"What is \$(\d+) \+ (\d+)\$\?")


# --- the instant model -------------------------------------------------------------------------------------------


def model_answer(body: bytes) -> bytes:
    """A chat completion with one `math_submit` call answering the `What is $A + B$?` problem in `body`."""
    answer = "0"
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        for message in reversed(json.loads(body).get("messages") or []):
            content = message.get("content")
            if isinstance(content, list):  # multimodal parts
                content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
            found = PROBLEM.search(content or "") if message.get("role") == "user" else None
            if found:
                answer = str(int(found.group(1)) + int(found.group(2)))
                break
    call = {"id": "call_0", "type": "function", "function": {"name": "math_submit",
                                                             "arguments": json.dumps({"answer": answer})}}
    return json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "instant",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }).encode()


async def _handle_model_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            length = int(headers.get("content-length") or 0)
            body = await reader.readexactly(length) if length else b""
            payload = model_answer(body) if lines[0].startswith("POST") else b'{"status":"ok"}'
            close = headers.get("connection", "").lower() == "close"
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                + str(len(payload)).encode()
                + (b"\r\nconnection: close" if close else b"")
                + b"\r\n\r\n"
                + payload
            )
            await writer.drain()
            if close:
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _serve_model(port: int) -> None:
    server = await asyncio.start_server(_handle_model_connection, HOST, port, backlog=1024)
    async with server:
        await server.serve_forever()


# --- processes ---------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log: Path
    port: int
    proc: subprocess.Popen | None = None
    rates: list[float] = field(default_factory=list)
    cpu_per_rollout: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        self.cwd.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            # Own session, so stopping it reaches anything it started (by this process group's id only).
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the server process so far (Linux /proc), None where unavailable."""
        if self.proc is None:
            return None
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


class BenchError(Exception):
    pass


def wait_ready(server: Server, url: str, headers: dict[str, str], timeout: float) -> float:
    import httpx

    started = time.monotonic()
    last = "no answer"
    while time.monotonic() - started < timeout:
        if server.proc is not None and server.proc.poll() is not None:
            raise BenchError(f"{server.name} exited with {server.proc.returncode} before it was ready:\n"
                             f"{server.log_tail()}")
        try:
            response = httpx.get(url, headers=headers, timeout=2.0)
            if response.status_code == 200:
                return time.monotonic() - started
            last = f"HTTP {response.status_code}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.2)
    raise BenchError(f"{server.name} not ready at {url} after {timeout:.0f} s ({last}):\n{server.log_tail()}")


# --- the load ----------------------------------------------------------------------------------------------------


def rollout_body(model_url: str, seed: int, tag: str) -> dict:
    return {
        "run_id": f"bench-{tag}-{seed}",
        "env": {"seed": seed, "config": {"split": "train"}},
        "policy": {"policy_id": "bench", "policy_name": "bench",
                   "config": {"model": "instant", "inference_url": model_url, "max_tokens": 16}},
        "ops": ["agent", "env"],
        "mode": "eval",
    }


def reward_of(data: dict) -> float | None:
    with contextlib.suppress(LookupError, TypeError, AttributeError):
        reward = data["trajectories"][0]["steps"][0]["reward"]
        return float(reward) if isinstance(reward, (int, float)) else None
    return None


def _cheap_missing_sniffio() -> None:
    """Make httpcore's per-call `import sniffio` fail fast in this (client) process when sniffio is absent.

    httpcore imports sniffio inside the function that picks the async backend, on every lock it creates; without
    sniffio installed each try searches sys.path again (tens of stat calls). A None entry in sys.modules makes the
    import fail at once with the same ImportError, so httpcore falls back to asyncio as before, at no cost. Only
    the load generator is patched; the servers under test run as they are.
    """
    import importlib.util

    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


async def load(server: Server, model_url: str, key: str, *, requests: int, concurrency: int, timeout: float,
               tag: str) -> tuple[float, list[float], dict[str, int]]:
    """`requests` rollouts, `concurrency` in flight; returns (wall seconds, latencies of counted ones, failures)."""
    import httpx

    _cheap_missing_sniffio()
    latencies: list[float] = []
    failures: dict[str, int] = {}
    next_seed = iter(range(requests))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=server.base, headers={"X-API-Key": key}, limits=limits,
                                 timeout=httpx.Timeout(timeout)) as client:

        async def worker() -> None:
            for seed in next_seed:
                started = time.perf_counter()
                try:
                    response = await client.post("/rollout", json=rollout_body(model_url, seed, tag))
                except httpx.HTTPError as exc:
                    why = type(exc).__name__
                else:
                    elapsed = time.perf_counter() - started
                    if response.status_code != 200:
                        why = f"HTTP {response.status_code}"
                    else:
                        try:
                            reward = reward_of(response.json())
                        except ValueError:
                            reward = None
                        if reward == 1.0:
                            latencies.append(elapsed)
                            continue
                        why = "no reward" if reward is None else f"reward {reward}"
                failures[why] = failures.get(why, 0) + 1

        started = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))),
                               timeout=timeout * (requests / concurrency + 2))
        wall = time.perf_counter() - started
    return wall, latencies, failures


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# --- setup -------------------------------------------------------------------------------------------------------


def write_dataset(directory: Path) -> None:
    """train.jsonl / test.jsonl of `What is $A + B$?` problems, each with a distinct pair."""
    directory.mkdir(parents=True, exist_ok=True)
    for split, rows, offset in (("train", TRAIN_ROWS, 0), ("test", TEST_ROWS, TRAIN_ROWS)):
        with open(directory / f"{split}.jsonl", "w") as handle:
            for i in range(rows):
                a, b = 100 + 7 * (i + offset), 3 * (i + offset) + 11
                handle.write(json.dumps({
                    "problem": f"What is ${a} + {b}$?",
                    "solution": f"Adding gives ${a} + {b} = {a + b}$. The answer is $\\boxed{{{a + b}}}$.",
                }) + "\n")


def _site_packages() -> Path:
    found = sorted(VENV_DIR.glob("lib/python*/site-packages"))
    if not found:
        raise BenchError(f"no site-packages under {VENV_DIR}")
    return found[0]


def base_env(home: Path, key: str, data_dir: Path, env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in env.items() if k not in DROPPED_ENV}
    env.update({
        "HOME": str(home),
        "ENVIRONMENT_API_KEY": key,
        "MATH_DATASET_LOCAL_DIR": str(data_dir),
        "PYTHONUNBUFFERED": "1",
        "NO_COLOR": "1",
        # Nothing leaves the machine: a backend URL that points nowhere, Hugging Face offline.
        "BACKEND_BASE_URL": "http://127.0.0.1:9/api",
        "SYNTH_BASE_URL": "http://127.0.0.1:9/api",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    })
    return env


def our_server(root: Path, key: str, data_dir: Path) -> Server:
    script = Path(sys.executable).with_name("synth-ai")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "synth_ai"]
    env = base_env(root / "home", key, data_dir, dict(os.environ))
    if not script.exists():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    port = free_port()
    work = root / "ours"
    argv += ["serve", APP_ID, "--host", HOST, "--port", str(port),
             "--trace", str(work / "traces"), "--trace-db", str(work / "traces" / "db.sqlite")]
    return Server("ours", argv, env, work, root / "ours.log", port)


def reference_server(root: Path, key: str, data_dir: Path) -> Server:
    ensure_reference_venv()
    apps = _site_packages() / "examples" / "task_apps" / "math"
    if not (apps / "math_single_step.py").exists():
        raise BenchError(f"the reference wheel's math app is missing: {apps / 'math_single_step.py'}")
    env = base_env(root / "home", key, data_dir, reference_env())
    hf_cache = root / "hf-cache"
    env.update({
        "GROQ_API_KEY": "dummy",  # the reference app's vendor proxy wants one; never used here
        "SYNTH_TASK_APP_SEARCH_PATH": str(apps),
        "MATH_DATASET_CACHE_DIR": str(hf_cache),
        "HF_HOME": str(hf_cache),
        "HF_DATASETS_CACHE": str(hf_cache),
        "HUGGINGFACE_HUB_CACHE": str(hf_cache),
    })
    port = free_port()
    work = root / "reference"
    argv = [str(reference_cli()), "serve", APP_ID, "--host", HOST, "--port", str(port),
            "--trace", str(work / "traces"), "--trace-db", str(work / "traces" / "db.sqlite")]
    return Server(f"baseline (synth-ai {REFERENCE_VERSION})", argv, env, work, root / "reference.log", port)


@contextlib.contextmanager
def started(servers: list[Server]) -> Iterator[None]:
    try:
        for server in servers:
            server.start()
        yield
    finally:
        for server in servers:
            server.stop()


def run_bench(args: argparse.Namespace) -> int:
    print(f"reproduce: python bench/rollout.py --requests {args.requests} --concurrency {args.concurrency} "
          f"--warmup {args.warmup} --rounds {args.rounds}")
    root = Path(tempfile.mkdtemp(prefix="synth-rollout-bench-"))
    keep = args.keep
    key = "sk_env_bench_" + secrets.token_hex(16)
    data_dir = root / "data"
    write_dataset(data_dir)
    (root / "home").mkdir()

    model_port = free_port()
    model = Server("instant model", [sys.executable, str(Path(__file__).resolve()), "--serve-model",
                                     str(model_port)], base_env(root / "home", key, data_dir, dict(os.environ)),
                   root, root / "model.log", model_port)
    model_url = f"http://{HOST}:{model_port}/v1"
    try:
        servers = [our_server(root, key, data_dir)]
        if not args.no_baseline:
            servers.append(reference_server(root, key, data_dir))
        for server in servers:
            print(f"  {server.name}: (cd {server.cwd} && {shlex.join(server.argv)})")
        with started([model, *servers]):
            wait_ready(model, f"{model.base}/", {}, 20)
            for server in servers:
                took = wait_ready(server, f"{server.base}/health", {"X-API-Key": key}, args.start_timeout)
                print(f"  {server.name} ready after {took:.1f} s")
            for server in servers:
                wall, lat, fails = asyncio.run(load(server, model_url, key, requests=args.warmup,
                                                    concurrency=args.concurrency, timeout=args.timeout,
                                                    tag="warmup"))
                if not lat:
                    raise BenchError(f"{server.name}: no warm-up rollout succeeded ({fails}):\n"
                                     f"{server.log_tail()}")
            for round_no in range(args.rounds):
                for server in servers:
                    cpu_before = server.cpu_seconds()
                    wall, lat, fails = asyncio.run(load(server, model_url, key, requests=args.requests,
                                                        concurrency=args.concurrency, timeout=args.timeout,
                                                        tag=f"r{round_no}"))
                    cpu_after = server.cpu_seconds()
                    server.rates.append(len(lat) / wall)
                    if cpu_before is not None and cpu_after is not None:
                        server.cpu_per_rollout.append((cpu_after - cpu_before) / args.requests)
                    server.latencies += lat
                    for why, n in fails.items():
                        server.failures[why] = server.failures.get(why, 0) + n
                    print(f"  round {round_no + 1} {server.name}: {len(lat)}/{args.requests} ok in {wall:.2f} s"
                          f" = {len(lat) / wall:.1f} req/s" + (f", failed: {fails}" if fails else ""))
    except (BenchError, asyncio.TimeoutError) as exc:
        print(f"error: {exc or 'timed out'}", file=sys.stderr)
        print("rollout: failed (see the error above)")
        keep = True
        return 1
    finally:
        if keep:
            print(f"  logs and traces kept in {root}")
        else:
            import shutil

            shutil.rmtree(root, ignore_errors=True)

    print(f"\n{args.requests} rollouts x {args.rounds} rounds at concurrency {args.concurrency} "
          f"(after {args.warmup} warm-up), tracing on for both:")
    for server in servers:
        lat = server.latencies
        cells = (f"median {statistics.median(server.rates):.1f} req/s (rounds: "
                 + ", ".join(f"{r:.1f}" for r in server.rates) + ")")
        if lat:
            cells += f", p50 {percentile(lat, 0.5) * 1000:.0f} ms, p95 {percentile(lat, 0.95) * 1000:.0f} ms"
        if server.cpu_per_rollout:
            cells += f", server CPU {statistics.median(server.cpu_per_rollout) * 1000:.1f} ms/rollout"
        if server.failures:
            cells += f", not counted: {server.failures}"
        print(f"  {server.name}: {cells}")
    ours = statistics.median(servers[0].rates)
    if len(servers) < 2:
        print(f"rollout: ours {ours:.1f} req/s, baseline n/a (--no-baseline)")
        return 0
    base = statistics.median(servers[1].rates)
    if ours == 0 or base == 0:
        print("rollout: failed (a side completed no rollout)")
        return 1
    ratio = ours / base
    print(f"\ntarget ratio >= 2: {'met' if ratio >= 2 else 'NOT met'}")
    print(f"rollout: ours {ours:.1f} req/s, baseline {base:.1f} req/s, ratio {ratio:.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=600, help="timed rollouts per side and round")
    parser.add_argument("--concurrency", type=int, default=32, help="rollouts in flight")
    parser.add_argument("--warmup", type=int, default=64, help="untimed rollouts per side first")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, ours and the baseline alternating")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    parser.add_argument("--start-timeout", type=float, default=120.0, help="seconds for a server to come up")
    parser.add_argument("--no-baseline", action="store_true", help="measure ours only")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, traces)")
    parser.add_argument("--serve-model", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_model is not None:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve_model(args.serve_model))
        return 0
    if args.requests < 1 or args.concurrency < 1 or args.warmup < 1 or args.rounds < 1:
        parser.error("--requests, --concurrency, --warmup and --rounds must be >= 1")
    return run_bench(args)


if __name__ == "__main__":
    raise SystemExit(main())
