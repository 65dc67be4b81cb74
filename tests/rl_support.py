"""Helpers for the RL tests: the bundled color-quiz app (optionally slowed down or answering garbage), RL job
bodies built from examples/configs/rl_tiny_local.toml, and `run_rl` in this process with a recording reporter."""

from __future__ import annotations

import asyncio
import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from backend_support import TINY_TEXT, link_tiny
from taskapp_support import REPO_ROOT

CONFIG = REPO_ROOT / "examples" / "configs" / "rl_tiny_local.toml"


def quiz_app(*, delay: Any = 0.0, garbage: Any = None, seen: list[tuple[str, int]] | None = None,
             finished: Any = None, fail: Any = None, gauge: dict[str, int] | None = None,
             arrived: Any = None) -> Any:
    """The bundled color-quiz app, optionally slowed down (`delay`: seconds, or seed -> seconds), answering
    garbage for some seeds, noting each request's (mode, seed) in `seen`, or calling `finished(seed)` once an
    episode is over (its policy calls all answered), failing (HTTP 500) the attempts whose run id `fail(run_id)`
    picks, keeping the number of /rollout requests in flight in `gauge` ("now", "peak"), or calling
    `arrived(run_id)` as each request comes in."""
    from synth_ai.taskapp import create_task_app
    from synth_ai.taskapp.discovery import load_task_app

    base = load_task_app("color-quiz").config_factory()

    async def rollout(request: Any, fastapi_request: Any = None) -> Any:
        if gauge is None:
            return await _rollout(request, fastapi_request)
        gauge["now"] = gauge.get("now", 0) + 1  # one event loop: no lock needed
        gauge["peak"] = max(gauge.get("peak", 0), gauge["now"])
        try:
            return await _rollout(request, fastapi_request)
        finally:
            gauge["now"] -= 1

    async def _rollout(request: Any, fastapi_request: Any = None) -> Any:
        if arrived is not None:
            arrived(request.run_id)
        if fail is not None and fail(request.run_id):
            raise RuntimeError("failing this attempt on purpose")
        if seen is not None:
            seen.append((str(request.mode.value if hasattr(request.mode, "value") else request.mode),
                         request.env.seed))
        wait = delay(request.env.seed) if callable(delay) else delay
        if wait:
            await asyncio.sleep(wait)
        if garbage is not None and garbage(request.env.seed):
            return {"hello": "world", "seed": request.env.seed}
        answer = await base.rollout(request, fastapi_request)
        if finished is not None:
            finished(request.env.seed)
        return answer

    return create_task_app(dataclasses.replace(base, rollout=rollout))


def config(*, tables: dict[str, dict[str, Any]] | None = None, **training: Any) -> dict[str, Any]:
    """The example config, small (2 seeds x 4 rollouts, no evaluation), `[training]` keys and whole tables
    overridden."""
    doc = tomllib.loads(CONFIG.read_text())
    doc["training"].update({"batch_size": 2, "group_size": 4, "rollout_retries": 1, **training})
    doc.pop("evaluation")
    for name, values in (tables or {}).items():
        doc.setdefault(name, {}).update(values)
    return doc


def rl_body(task_url: str, *, tables: dict[str, dict[str, Any]] | None = None, **training: Any) -> dict[str, Any]:
    return {"job_type": "rl", "data": {"endpoint_base_url": task_url, "config": config(tables=tables, **training),
                                        "base_model": TINY_TEXT}}


class Recorder:
    def __init__(self, on_event: Any = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.metrics: list[tuple[str, int, float]] = []
        self.on_event = on_event

    def event(self, type: str, message: str, data: dict[str, Any] | None = None, level: str = "info") -> None:  # noqa: A002
        self.events.append({"type": type, "message": message, "data": data or {}, "level": level})
        if self.on_event:
            self.on_event(type)

    def metric(self, name: str, step: int, value: float, phase: str = "train") -> None:
        self.metrics.append((name, step, value))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def series(self, name: str) -> list[float]:
        return [v for n, _step, v in sorted(self.metrics, key=lambda m: m[1]) if n == name]


def run_in_process(tmp_path: Path, tiny_text: list[Path] | None, task_url: str, recorder: Recorder,
                   should_stop: Any = None, tables: dict[str, dict[str, Any]] | None = None, parts: Any = None,
                   **training: Any) -> dict[str, Any]:
    """`run_rl` in this process on the tiny Qwen3 (linked into a store of its own); with `parts`
    (`fake_rl.FakeRL().parts()`) on those instead, and `tiny_text` may be None (no model is loaded)."""
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl import run_rl

    data = tmp_path / "store"
    if tiny_text is not None:
        link_tiny(data, tiny_text)
    spec = {"job_id": "rljob_local", **rl_body(task_url, tables=tables, **training)}
    return run_rl(spec, workdir=tmp_path / "work", model_store=ModelStore(data), reporter=recorder,
                  should_stop=should_stop or (lambda: False), parts=parts)


def record_policy_calls(monkeypatch: Any, into: list) -> None:
    """Keep in `into` every policy call (with its samples) that `run_rl` takes from the built-in engine."""
    from synth_ai.backend.inference.policy_server import LocalPolicyServer

    real = LocalPolicyServer.take_calls

    def take_calls(self: Any, cid: str) -> list:
        calls = real(self, cid)
        into.extend(calls)
        return calls

    monkeypatch.setattr(LocalPolicyServer, "take_calls", take_calls)


def hold_first_publish_until_calls(monkeypatch: Any, calls: int, timeout_s: float = 600.0) -> None:
    """Make asynchronous GSPO's overlap deterministic: the built-in engine's first `publish` (the trainer's first
    optimiser step) waits until the engine has answered `calls` chat completions, so the calls of the next batch
    that come before it are sampled by the old weights however the pool's and the trainer's threads are scheduled.
    The wait is bounded: a run that never makes those calls fails here, with the count it reached."""
    import threading

    from synth_ai.backend.inference.policy_server import LocalPolicyServer

    answered = threading.Condition()
    count = [0]
    real_complete, real_publish = LocalPolicyServer.complete, LocalPolicyServer.publish

    def complete(self: Any, body: dict[str, Any], cid: str | None) -> dict[str, Any]:
        completion = real_complete(self, body, cid)
        with answered:
            count[0] += 1
            answered.notify_all()
        return completion

    def publish(self: Any, version: int) -> None:
        with answered:
            if not answered.wait_for(lambda: count[0] >= calls, timeout=timeout_s):
                raise AssertionError(f"the engine answered {count[0]} calls before the first publish, not {calls}")
        real_publish(self, version)

    monkeypatch.setattr(LocalPolicyServer, "complete", complete)
    monkeypatch.setattr(LocalPolicyServer, "publish", publish)


def torchrun_backend(data: Path, tmp_path: Path, env_key: str, ranks: int = 2) -> Any:
    """A started backend whose RL jobs run data-parallel under torchrun (`ranks` gloo ranks on the CPU), keyed for
    the task app, with no warm worker and no Modal credentials."""
    from backend_support import BackendProcess

    return BackendProcess(data, env={
        "ENVIRONMENT_API_KEY": env_key, "SYNTH_AI_BACKEND_EXECUTOR": "torchrun",
        "SYNTH_AI_BACKEND_TORCHRUN_NPROC": str(ranks), "SYNTH_AI_BACKEND_WARM_WORKER": "0",
        "SYNTH_AI_BACKEND_GPUS": "0", "MODAL_CONFIG_PATH": str(tmp_path / "none"), "MODAL_TOKEN_ID": "",
        "MODAL_TOKEN_SECRET": ""}).start()


def saved_weights(folder: Path) -> dict:
    """Every tensor of the safetensors files a job saved in `folder` (its final model or a checkpoint)."""
    from safetensors.torch import load_file

    out = {}
    for path in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(path)))
    assert out, f"no weights in {folder}"
    return out
