"""Many concurrent rollouts against each bundled task app, served as a real `synth-ai serve` process; the policy
is a scripted OpenAI-compatible model server (real HTTP), answering each app the way its tools expect."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from reliability.load_stats import Exchange, LoadLog
from taskapp_support import (
    ENV_KEY,
    completion,
    headers,
    stop,
    subprocess_env,
    synth_ai_command,
    tool_call,
    wait_for_health,
)

from conftest import REPO_ROOT, free_port

APPS = ("math-single-step", "color-quiz", "grpo-crafter-task-app")


def scripted_policy(body: dict[str, Any]) -> dict[str, Any]:
    """A valid answer for whichever app asks: a crafter move, a math submission, or a colour sentence."""
    tools = {t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    if "interact_many" in tools:
        return completion(tool_calls=[tool_call("interact_many", {"actions": ["move_left", "noop"]})])
    if "math_submit" in tools:
        return completion(tool_calls=[tool_call("math_submit", {"answer": "0"})])
    return completion("The sky is blue.")


def rollout_body(app: str, model_url: str, seed: int) -> dict[str, Any]:
    policy: dict[str, Any] = {"model": "scripted", "inference_url": f"{model_url}?cid=load-{app}-{seed}"}
    env: dict[str, Any] = {"seed": seed, "config": {}}
    name = "load"
    if app == "grpo-crafter-task-app":
        env["config"] = {"area": [32, 32]}
        policy["max_turns"] = 2
        name = "crafter-react"
    elif app == "math-single-step":
        env["config"] = {"split": "train"}
    return {"run_id": f"load-{seed}", "env": env, "policy": {"policy_name": name, "config": policy},
            "ops": ["agent", "env"] if app != "grpo-crafter-task-app" else [], "mode": "eval"}


@contextmanager
def served_app(app: str) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([*synth_ai_command(), "serve", app, "--port", str(port)], cwd=str(REPO_ROOT),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               text=True, env=subprocess_env(ENVIRONMENT_API_KEY=ENV_KEY, OMP_NUM_THREADS="1"))
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base, process=process, timeout=60)
        yield base
    finally:
        stop(process)


async def _rollouts(app: str, base: str, model_url: str, count: int, log: LoadLog) -> None:
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(base_url=base, headers=headers(), timeout=300, limits=limits) as client:
        async def one(seed: int) -> None:
            started = time.monotonic()
            op = f"{app} rollout"
            try:
                response = await client.post("/rollout", json=rollout_body(app, model_url, seed))
            except httpx.HTTPError as exc:
                log.add(Exchange(op, None, time.monotonic() - started, error=type(exc).__name__))
                log.failed(f"{op} {seed}: {type(exc).__name__}")
                return
            seconds = time.monotonic() - started
            log.add(Exchange(op, response.status_code, seconds, locked=b"database is locked" in response.content))
            log.timed(op, seconds)
            if response.status_code != 200 or not response.json().get("trajectories"):
                log.failed(f"{op} {seed}: {response.status_code} {response.text[:200]}")

        await asyncio.gather(*(one(seed) for seed in range(count)))


def run_taskapp_load(app: str, model_url: str, count: int, log: LoadLog) -> dict[str, Any]:
    """`count` rollouts at once against a freshly served `app`; its health is checked again afterwards."""
    with served_app(app) as base:
        started = time.monotonic()
        asyncio.run(_rollouts(app, base, model_url, count, log))
        wall = time.monotonic() - started
        healthy = httpx.get(f"{base}/health", headers=headers(), timeout=10).status_code == 200
    return {"app": app, "rollouts": count, "wall_s": round(wall, 1), "healthy_after": healthy}
