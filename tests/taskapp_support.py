"""Helpers for the task-app tests: a scripted OpenAI-compatible model server and real servers on free ports.

The scripted model is a real uvicorn server whose answers come from the test (`policy(body) -> completion`); the
task apps under test are real apps built by `create_task_app`, never mocks.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV_KEY = "sk_env_test_0123456789abcdef"


def completion(content: str | None = None, tool_calls: list[dict[str, Any]] | None = None,
               model: str = "scripted-model") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


class ScriptedModel:
    """An OpenAI-compatible chat-completions server; `policy(body)` returns a completion dict, or
    `(status, text)` for a raw answer. Every request is kept in `requests`."""

    def __init__(self, policy: Callable[[dict[str, Any]], Any]) -> None:
        self.policy = policy
        self.requests: list[dict[str, Any]] = []

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/{path:path}")
        async def chat(path: str, request: Request):
            body = await request.json()
            self.requests.append({"path": "/" + path, "query": dict(request.query_params), "body": body,
                                  "headers": dict(request.headers)})
            result = self.policy(body)
            if inspect.isawaitable(result):
                result = await result
            if isinstance(result, tuple):
                status, text = result
                return Response(text, status_code=status, media_type="text/plain")
            return JSONResponse(result)

        return app


@contextmanager
def scripted_model(policy: Callable[[dict[str, Any]], Any]) -> Iterator[tuple[str, ScriptedModel]]:
    """Yields (base URL ending in /v1, the model server)."""
    from synth_ai.taskapp.serving import running_in_background

    model = ScriptedModel(policy)
    with running_in_background(model.app()) as base:
        yield f"{base}/v1", model


@contextmanager
def running_app(app: Any) -> Iterator[str]:
    from synth_ai.taskapp.serving import running_in_background

    with running_in_background(app) as base:
        yield base


def math_entry():
    from synth_ai.taskapp.discovery import load_task_app

    return load_task_app("math-single-step")


def headers(key: str = ENV_KEY) -> dict[str, str]:
    return {"X-API-Key": key}


def rollout_body(inference_url: str, *, seed: int = 0, split: str = "train", mode: str = "eval",
                 **policy: Any) -> dict[str, Any]:
    return {"run_id": f"run-{seed}", "env": {"seed": seed, "config": {"split": split}},
            "policy": {"policy_name": "test", "config": {"model": "scripted-model", "inference_url": inference_url,
                                                         **policy}},
            "ops": ["agent", "env"], "mode": mode}


def synth_ai_command() -> list[str]:
    exe = Path(sys.executable).parent / "synth-ai"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("synth-ai")
    return [found] if found else [sys.executable, "-m", "synth_ai"]


def wait_for_health(base_url: str, key: str = ENV_KEY, *, timeout: float = 30.0,
                    process: subprocess.Popen | None = None) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            out = process.stdout.read() if process.stdout else ""
            raise AssertionError(f"server exited early with {process.returncode}:\n{out}")
        try:
            response = httpx.get(f"{base_url}/health", headers=headers(key), timeout=2.0)
            if response.status_code == 200:
                return response
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"{base_url} never became healthy: {last}")


def stop(process: subprocess.Popen) -> str:
    """Stop a process this test started (by its own handle) and return its output."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    return process.stdout.read() if process.stdout else ""


@contextmanager
def served_app(app_id: str, key: str, *, cwd: Path, isolated: bool = False, **env: str) -> Iterator[str]:
    """`synth-ai serve <app_id>` in its own process on a free port, with `key` as its ENVIRONMENT_API_KEY (and
    `env` added); yields its URL once healthy and stops it afterwards."""
    from conftest import free_port

    port = free_port()
    process = subprocess.Popen([*synth_ai_command(), "serve", app_id, "--port", str(port)], cwd=cwd,
                               env=subprocess_env(isolated=isolated, ENVIRONMENT_API_KEY=key, **env),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, key, process=process)
        yield url
    finally:
        stop(process)


class RestartableApp:
    """`synth-ai serve <app_id>` in its own process on one free port, which it keeps across stops and starts (a
    task app that restarts)."""

    def __init__(self, app_id: str, key: str, *, cwd: Path) -> None:
        from conftest import free_port

        self.app_id, self.key, self.cwd = app_id, key, cwd
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self, *, wait: bool = True) -> None:
        self.process = subprocess.Popen([*synth_ai_command(), "serve", self.app_id, "--port", str(self.port)],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=self.cwd,
                                        stdin=subprocess.DEVNULL, env=subprocess_env(ENVIRONMENT_API_KEY=self.key))
        self.starts += 1
        if wait:
            wait_for_health(self.url, self.key, process=self.process)

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
            self.process = None

    def kill(self) -> None:
        """SIGKILL: requests in flight lose their connection."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None


def subprocess_env(*, isolated: bool = False, **extra: str) -> dict[str, str]:
    """This process's environment for a child. `isolated` drops the settings tests isolate: a module-scoped
    fixture starts its servers before the per-test isolation applies, so a key or backend URL an earlier
    in-process command loaded from a `.env` would otherwise reach them."""
    from conftest import _ISOLATED_VARS

    env = {k: v for k, v in os.environ.items() if not (isolated and k in _ISOLATED_VARS)}
    env.update({"PYTHONUNBUFFERED": "1", **extra})
    return env


def generated_app_probe(script: Path) -> str:
    """The start of a child's Python source that loads a generated Modal app file as its container does and binds
    `app` to the web function's ASGI app (run through `.local()`); the file itself must need only `modal`."""
    return textwrap.dedent(f'''
        import importlib.util, sys, warnings
        warnings.simplefilter("ignore")
        spec = importlib.util.spec_from_file_location("container_app", {str(script)!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert "synth_ai" not in sys.modules  # the generated file itself needs only modal
        app = module.fastapi_app.local()
    ''')
