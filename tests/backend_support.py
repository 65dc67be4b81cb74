"""Helpers for the embedded-backend tests: a real `synth-ai backend serve` subprocess on a free port, an httpx
client with its key, and the tiny model built once per machine (cached under .pytest_cache) and linked into each
test's data dir so no test pays for building it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from conftest import free_port

TINY_TEXT = "synth-ai/tiny-qwen3"


class BackendProcess:
    def __init__(self, data_dir: Path, *, port: int | None = None, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.extra_env = env or {}
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"backend-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def key(self) -> str:
        return json.loads((self.data_dir / "backend_keys.json").read_text())["default"]

    def start(self, timeout: float = 30.0) -> BackendProcess:
        env = dict(os.environ)
        env.update({"SYNTH_AI_HOME": str(self.data_dir), "OMP_NUM_THREADS": "1", **self.extra_env})
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "synth_ai", "backend", "serve", "--port", str(self.port), "--log-level", "warning"],
            stdout=log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
        log.close()
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
        raise RuntimeError(f"backend did not start:\n{self.log()}")

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


def build_tiny_text(cache_root: Path) -> Path:
    """Build synth-ai/tiny-qwen3 once into `cache_root` (a subprocess: torch stays out of the test process)."""
    code = ("import sys; from pathlib import Path; from synth_ai.backend.modelstore import ModelStore; "
            "print(ModelStore(Path(sys.argv[1])).ensure_tiny(sys.argv[2]))")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code, str(cache_root), TINY_TEXT], check=True, capture_output=True,
                         text=True, env=env, timeout=600)
    return Path(out.stdout.strip().splitlines()[-1])


def link_tiny(data_dir: Path, built: Path) -> None:
    """Make a built tiny model visible in `data_dir`'s model store (a symlink to the cached folder)."""
    target = data_dir / "models" / "tiny" / built.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        target.symlink_to(built, target_is_directory=True)


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


def sft_body(file_id: str, *, steps: int | None = None, **hyper: Any) -> dict[str, Any]:
    hp: dict[str, Any] = {"n_epochs": 1, "learning_rate": 1e-3, "per_device_batch": 2, "sequence_length": 64}
    if steps is not None:
        hp["total_steps"] = steps
    hp.update(hyper)
    return {"model": TINY_TEXT, "hyperparameters": hp, "training_type": "sft_offline",
            "metadata": {"effective_config": {}}, "training_file_id": file_id}


def events(client: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/learning/jobs/{job_id}/events", params={"since_seq": 0, "limit": 1000})
    response.raise_for_status()
    return response.json()["events"]


def job_status(client: httpx.Client, job_id: str) -> str:
    return client.get(f"/learning/jobs/{job_id}").json()["status"]
