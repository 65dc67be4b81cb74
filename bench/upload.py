"""Bench: uploading a large dataset to the embedded backend, our client against curl, and the backend's memory.

Starts `synth-ai backend serve` on a free port with a throwaway data dir (under bench/.cache/), generates a
deterministic JSONL of chat records (`--size-mb`, default 1024, cached under bench/.cache/), then uploads it
`--runs` times with each client, interleaved, to the same endpoint (`POST /api/files`, purpose=fine-tune):

- ours: `SynthAPI(Transport(...)).files.upload(path)`: the client code `synth-ai train` uses (httpx, a streamed
  multipart body from `synth_ai.client.uploads`, constant memory), timed in this process;
- baseline: `curl -F file=@PATH -F purpose=fine-tune` as a whole process.

The backend validates large datasets in the background after answering; the bench waits for that to finish
before the next upload so runs do not overlap. It reports each run's MB/s (MB = 10^6 bytes), the median per
client, and the backend's peak RSS (VmHWM) after start-up, after a small warm-up upload and after all the large
uploads: flat memory means the last two are close whatever the file size. Ends with
`upload: ours X MB/s, baseline Y MB/s, ratio Z` (target ratio >= 0.7).

    python bench/upload.py                      # 1 GiB file, 3 runs each
    python bench/upload.py --size-mb 200 --runs 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
CACHE_DIR = BENCH_DIR / ".cache"
GENERATOR_VERSION = 1


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def dataset(size_mb: int) -> Path:
    """A valid SFT JSONL of about `size_mb` MiB (deterministic; built once and cached)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = CACHE_DIR / f"upload-v{GENERATOR_VERSION}-{size_mb}mb.jsonl"
    if path.exists():
        return path
    log(f"generating {path.name} ...")
    target = size_mb * 1024 * 1024
    lines = []
    for i in range(1000):
        record = {"messages": [
            {"role": "system", "content": "You are a careful assistant that answers arithmetic questions."},
            {"role": "user", "content": f"Question {i}: what is {i} times {i + 7}? Explain briefly. " * 3},
            {"role": "assistant", "content": f"{i} times {i + 7} is {i * (i + 7)}, because we multiply. " * 4}]}
        lines.append(json.dumps(record))
    block = ("\n".join(lines) + "\n").encode()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as handle:
        written = 0
        while written < target:
            handle.write(block)
            written += len(block)
    os.replace(tmp, path)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def peak_rss_mb(pid: int) -> tuple[float, float]:
    """(VmHWM, VmRSS) of a process in MiB."""
    values = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(("VmHWM:", "VmRSS:")):
                name, value = line.split(":", 1)
                values[name] = int(value.split()[0]) / 1024
    return values.get("VmHWM", 0.0), values.get("VmRSS", 0.0)


class Backend:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, SYNTH_AI_HOME=str(home))
        self.log_path = home / "bench-backend.log"
        home.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log_file:
            self.proc = subprocess.Popen([sys.executable, "-m", "synth_ai", "backend", "serve", "--port",
                                          str(self.port), "--log-level", "warning"], env=env, stdout=log_file,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"backend exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise SystemExit("backend did not start")
        self.key = json.loads((home / "backend_keys.json").read_text())["default"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def wait_settled(api, file_id: str, timeout: float = 1800) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = api.files.get(file_id)["status"]
        if status not in {"uploaded", "processing"}:
            return status
        time.sleep(0.5)
    raise SystemExit(f"file {file_id} still processing after {timeout}s")


def upload_ours(api, path: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    doc = api.files.upload(path, purpose="fine-tune")
    return time.perf_counter() - t0, doc["id"]


def upload_curl(backend: Backend, path: Path) -> tuple[float, str]:
    cmd = ["curl", "-sS", "--fail-with-body", "-H", f"Authorization: Bearer {backend.key}",
           "-F", "purpose=fine-tune", "-F", f"file=@{path};type=application/jsonl", f"{backend.url}/api/files"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"curl failed ({out.returncode}): {out.stdout[-500:]} {out.stderr[-500:]}")
    return seconds, json.loads(out.stdout)["id"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="Size of the uploaded file in MiB.")
    parser.add_argument("--runs", type=int, default=3, help="Uploads per client.")
    args = parser.parse_args(argv)
    if shutil.which("curl") is None:
        raise SystemExit("curl is not installed: it is the baseline.")

    from synth_ai.client.resources import SynthAPI
    from synth_ai.client.transport import Transport

    path = dataset(args.size_mb)
    small = dataset(8)
    size_mb = path.stat().st_size / 1e6
    home = Path(tempfile.mkdtemp(prefix="upload-home-", dir=CACHE_DIR))
    backend = Backend(home)
    results: dict[str, list[float]] = {"ours": [], "curl": []}
    try:
        api = SynthAPI(Transport(f"{backend.url}/api", backend.key))
        rss_start = peak_rss_mb(backend.proc.pid)
        _, warm_id = upload_ours(api, small)
        wait_settled(api, warm_id)
        rss_small = peak_rss_mb(backend.proc.pid)
        log(f"backend pid {backend.proc.pid}; file {path.name} ({size_mb:,.0f} MB); {args.runs} runs each")
        for run in range(args.runs):
            for name in ("ours", "curl"):
                seconds, file_id = upload_ours(api, path) if name == "ours" else upload_curl(backend, path)
                status = wait_settled(api, file_id)
                rate = size_mb / seconds
                results[name].append(rate)
                hwm, rss = peak_rss_mb(backend.proc.pid)
                log(f"  run {run + 1} {name:4s}: {seconds:6.2f} s  {rate:7.1f} MB/s  file {status}  "
                    f"backend peak RSS {hwm:,.0f} MiB (now {rss:,.0f} MiB)")
        rss_end = peak_rss_mb(backend.proc.pid)
        api.close()
    finally:
        backend.stop()
        shutil.rmtree(home, ignore_errors=True)

    ours = statistics.median(results["ours"])
    base = statistics.median(results["curl"])
    print(f"backend peak RSS: {rss_start[0]:,.0f} MiB after start, {rss_small[0]:,.0f} MiB after an 8 MiB upload, "
          f"{rss_end[0]:,.0f} MiB after {2 * args.runs} uploads of {size_mb:,.0f} MB")
    print(f"median MB/s: ours {ours:.1f} (runs {', '.join(f'{r:.1f}' for r in results['ours'])}), "
          f"curl {base:.1f} (runs {', '.join(f'{r:.1f}' for r in results['curl'])})")
    print(f"upload: ours {ours:.1f} MB/s, baseline {base:.1f} MB/s, ratio {ours / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
