"""Helpers for the embedded-backend tests: a real `synth-ai backend serve` subprocess on a free port, an httpx
client with its key, and the tiny models built once per session and linked into each test's data dir so no test
pays for building them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from conftest import free_port

TINY_TEXT = "synth-ai/tiny-qwen3"
TINY_VL = "synth-ai/tiny-qwen3-vl"


# Set to a file path, every backend start appends a line to it (the test that started it, and whether its warm
# worker is on): how the suite's backend starts are counted (docs/decisions.md, "Shared test backends").
STARTS_LOG_ENV = "SYNTH_AI_TEST_BACKEND_STARTS"
WARM_WORKER_ENV = "SYNTH_AI_BACKEND_WARM_WORKER"


class BackendProcess:
    def __init__(self, data_dir: Path, *, port: int | None = None, env: dict[str, str | None] | None = None,
                 cwd: Path | None = None) -> None:
        """`env` adds to (or, with None as the value, removes from) this process's environment and the backend's
        defaults, among them OMP_NUM_THREADS=1. `cwd` is the server's working directory (default: this one)."""
        self.data_dir = data_dir
        self.port = port or free_port()
        self.extra_env = env or {}
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"backend-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def key(self) -> str:
        return json.loads((self.data_dir / "backend_keys.json").read_text())["default"]

    def start(self, timeout: float = 60.0) -> BackendProcess:
        env = dict(os.environ)
        env.update({"SYNTH_AI_HOME": str(self.data_dir), "OMP_NUM_THREADS": "1"})
        for key, value in self.extra_env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "synth_ai", "backend", "serve", "--port", str(self.port), "--log-level", "warning"],
            stdout=log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL, cwd=self.cwd)
        log.close()
        _record_start(env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"backend exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()  # not left serving (and warming a worker) for the rest of the session
        raise RuntimeError(f"backend did not start within {timeout:.0f} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def client(self, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key}", **kwargs.pop("headers", {})}
        return httpx.Client(base_url=f"{self.url}/api", headers=headers, timeout=kwargs.pop("timeout", 60), **kwargs)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _record_start(env: dict[str, str]) -> None:
    if os.environ.get(STARTS_LOG_ENV):
        warm = "cold" if env.get(WARM_WORKER_ENV) == "0" else "warm"
        with open(os.environ[STARTS_LOG_ENV], "a") as starts:
            starts.write(f"{warm} {os.environ.get('PYTEST_CURRENT_TEST', '?').split(' ')[0]}\n")


def build_tiny_models(store_root: Path, model_ids: tuple[str, ...] = (TINY_TEXT, TINY_VL)) -> list[Path]:
    """Build the tiny models once into a model store at `store_root` (in a subprocess: torch stays out of the test
    process) and return their folders. Pass the session's `ml-core-data` folder to share the build with the ML
    test modules."""
    code = ("import sys; from pathlib import Path; from synth_ai.backend.store.model_store import ModelStore; "
            "store = ModelStore(Path(sys.argv[1])); [print(store.resolve(m)) for m in sys.argv[2:]]")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code, str(store_root), *model_ids], check=True, capture_output=True,
                         text=True, env=env, timeout=600)
    return [Path(line) for line in out.stdout.strip().splitlines()[-len(model_ids):]]


def serve_backend(tmp_path_factory: Any, label: str, *, tiny: tuple[str, ...] = (),
                  env: dict[str, str | None] | None = None, warm: bool = True,
                  prepare: Callable[[Path], None] | None = None, cwd: Path | None = None,
                  folder: Path | None = None) -> Iterator[BackendProcess]:
    """Body of a module- or session-scoped fixture: a backend in a fresh data dir `<label>N/home` (with the tiny
    models of `tiny` linked in, built once per session; then `prepare(data_dir)` for anything else the data dir
    must hold before the start), stopped afterwards. `env` as for `BackendProcess`; `warm=False` turns the warm
    worker off, for the tests of the cold path; `cwd` as for `BackendProcess`. `folder` (default: a fresh one
    named after `label`) is where the data dir and the server's log go. A module whose tests only read, or create
    what no other test's assertions can see, uses conftest's `shared_backend` instead."""
    data_dir = (folder or tmp_path_factory.mktemp(label)) / "home"
    data_dir.mkdir()
    if tiny:
        link_tiny(data_dir, build_tiny_models(tmp_path_factory.getbasetemp() / "ml-core-data", tiny))
    if prepare is not None:
        prepare(data_dir)
    process = BackendProcess(data_dir, env={**({} if warm else {WARM_WORKER_ENV: "0"}), **(env or {})}, cwd=cwd)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def job_store(backend: BackendProcess) -> Iterator[Any]:
    """Body of a fixture: the backend's job store, opened the way a worker process opens it (a worker's writes are
    what the API serves), closed afterwards."""
    from synth_ai.backend.store.db import Database
    from synth_ai.backend.store.job_records import JobStore

    db = Database(backend.data_dir / "backend" / "backend.sqlite3")
    try:
        yield JobStore(db)
    finally:
        db.close()


def link_tiny(data_dir: Path, built: list[Path]) -> None:
    """Make built tiny models visible in `data_dir`'s model store (symlinks to the shared folders)."""
    for folder in built:
        target = data_dir / "models" / "tiny" / folder.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.symlink_to(folder, target_is_directory=True)


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.1, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def chat_jsonl(path: Path, n: int = 8) -> Path:
    lines = []
    for i in range(n):
        lines.append(json.dumps({"messages": [
            {"role": "user", "content": f"What is {i} plus {i}?"},
            {"role": "assistant", "content": f"{i} plus {i} is {2 * i}."}]}))
    path.write_text("\n".join(lines) + "\n")
    return path


def upload(client: httpx.Client, path: Path, *, purpose: str = "fine-tune", route: str = "/files",
           headers: dict[str, str] | None = None) -> httpx.Response:
    with open(path, "rb") as handle:
        return client.post(route, files={"file": (path.name, handle, "application/jsonl")},
                           data={"purpose": purpose}, headers=headers or {})


def picture_jsonl(path: Path, n: int = 8) -> Path:
    """Chats about a coloured square, the picture as a PNG data URL (for the tiny Qwen3-VL)."""
    import base64
    import io

    from PIL import Image

    colours = {"red": (220, 30, 30), "green": (30, 200, 60), "blue": (30, 60, 220)}
    lines = []
    for i in range(n):
        name = list(colours)[i % len(colours)]
        image = Image.new("RGB", (32, 32), (255, 255, 255))
        image.paste(colours[name], (6 + i % 4, 6, 24 + i % 4, 24))
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
        lines.append(json.dumps({"messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": "Which colour is the square?"}]},
            {"role": "assistant", "content": f"The square is {name}."}]}))
    path.write_text("\n".join(lines) + "\n")
    return path


def sft_body(file_id: str, *, steps: int | None = None, model: str = TINY_TEXT, **hyper: Any) -> dict[str, Any]:
    hp: dict[str, Any] = {"n_epochs": 1, "learning_rate": 1e-3, "per_device_batch": 2, "sequence_length": 64}
    if steps is not None:
        hp["total_steps"] = steps
    hp.update(hyper)
    return {"model": model, "hyperparameters": hp, "training_type": "sft_offline",
            "metadata": {"effective_config": {}}, "training_file_id": file_id}


def events(client: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/learning/jobs/{job_id}/events", params={"since_seq": 0, "limit": 1000})
    response.raise_for_status()
    return response.json()["events"]


def job_status(client: httpx.Client, job_id: str) -> str:
    return client.get(f"/learning/jobs/{job_id}").json()["status"]


def cancel_unfinished_sft(backend: BackendProcess) -> None:
    """Cancel the SFT jobs still queued or running: what `--no-poll` tests leave behind would otherwise train, for
    nothing they check, while the module's next tests wait behind them on a busy machine."""
    with backend.client() as client:
        for job in client.get("/learning/jobs", params={"limit": 200}).json()["data"]:
            if job["status"] in ("queued", "running"):
                client.post(f"/learning/jobs/{job['id']}/cancel")


def warm_worker_pid(data_dir: Path) -> int | None:
    """Pid of the warm worker process waiting for a job in the backend that uses `data_dir`, or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"synth_ai.backend.jobs.worker\0--warm" in cmdline and f"SYNTH_AI_HOME={data_dir}".encode() in environ:
            return int(pid)
    return None


def warm_ready_count(data_dir: Path) -> int:
    """How many warm worker processes of this data dir's backend have said they are ready, so far."""
    try:
        return (data_dir / "backend" / "warm_worker.log").read_text(errors="replace").count(": ready after ")
    except OSError:
        return 0


def worker_pids(job_id: str) -> list[int]:
    """Live processes whose command line runs this job's worker (the launcher and its ranks)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if b"synth_ai.backend.jobs.worker" in cmdline and job_id.encode() in cmdline and state != "Z":
            found.append(int(pid))
    return found
