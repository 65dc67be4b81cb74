"""The policy side of a rollout: which chat-completions endpoint the task app calls, and the `/rollout` body.

The endpoint, in order: an `inference_url` in the config (`[eval.policy_config]`, `[eval.policy]` or top-level:
any OpenAI-compatible server); else the Synth backend's `/api/inference/v1/chat/completions` on `--backend` (or
BACKEND_BASE_URL, ...), or on this machine's embedded backend, started as `train` starts it when none runs. The
task app authenticates to a Synth endpoint itself (`synth_ai.taskapp.inference`: the embedded backend's key on
this machine, SYNTH_API_KEY elsewhere); vendor endpoints get their vendor's key.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from synth_ai.config.eval import names_model_endpoint
from synth_ai.taskapp.client import wire_body
from synth_ai.taskapp.contracts import RolloutRequest
from synth_ai.urls import join_url

# Top-level [eval] keys that synth-ai 0.2.17 moves into the policy config.
POLICY_KEYS = ("temperature", "max_tokens", "reasoning_effort", "system_hint", "tool_choice", "inference_url",
               "thinking_mode", "thinking_budget", "use_vision", "image_only_mode")


@dataclass(frozen=True)
class InferenceTarget:
    url: str | None  # None: the config's inference_url is used as written
    source: str  # for messages: "config", "embedded backend", "--backend", ...


def policy_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Top-level keys, then `[eval.policy]`, then `[eval.policy_config]` (later wins), as the reference merges."""
    merged = {k: cfg[k] for k in POLICY_KEYS if cfg.get(k) is not None}
    for table in ("policy", "policy_config"):
        if isinstance(cfg.get(table), dict):
            merged.update({k: v for k, v in cfg[table].items() if v is not None})
    if cfg.get("max_turns") is not None:
        merged.setdefault("max_turns", cfg["max_turns"])
    return merged


def resolve_inference(cfg: dict[str, Any], backend_flag: str | None, say: Callable[[str], None]) -> InferenceTarget:
    if names_model_endpoint(cfg):
        if backend_flag:
            say(f"note: --backend {backend_flag} is not used: the config's inference_url names the model endpoint.")
        return InferenceTarget(None, "config")
    from synth_ai.connect.embedded_backend import locate_embedded
    from synth_ai.env.backend_url import resolve_backend

    backend = resolve_backend(backend_flag)
    if backend.embedded and backend.source == "embedded default":
        backend = locate_embedded(backend, say, autostart=True)
    label = "embedded backend" if backend.embedded else backend.source
    return InferenceTarget(join_url(backend.api_base, "inference/v1/chat/completions"), label)


def rollout_request(*, seed: int, model: str, split: str, cfg: dict[str, Any],
                    target: InferenceTarget) -> RolloutRequest:
    """The reference's `/rollout` request for one seed (`mode: "eval"`; `record` names only the trace keys, and
    `on_done` and `safety` are left to the app, as 0.2.17's eval sends them)."""
    policy = policy_config(cfg)
    if target.url is not None:
        policy.setdefault("inference_url", target.url)
    if cfg.get("sampling_seed") is not None:  # ours: each seed samples its own tokens, the same ones on every run
        policy.setdefault("seed", sampling_seed_of(int(cfg["sampling_seed"]), seed))
    max_llm_calls = policy.get("max_llm_calls") or cfg.get("max_llm_calls") or 10
    body: dict[str, Any] = {
        "run_id": str(uuid.uuid4()),
        "env": {"config": {"split": split, "index": seed, **(cfg.get("env_config") or {})}, "seed": seed},
        "policy": {"policy_name": cfg.get("policy_name") or model, "config": {**policy, "model": model}},
        "ops": list(cfg.get("ops") or ["agent", "env"] * int(max_llm_calls)),
        "record": {"return_trace": True if cfg.get("return_trace") is None else cfg["return_trace"],
                   "trace_format": cfg.get("trace_format") or "structured"},
        "mode": "eval",
    }
    if cfg.get("env_name"):
        body["env"]["env_name"] = cfg["env_name"]
    return RolloutRequest.model_validate(body)


def sampling_seed_of(sampling_seed: int, seed: int) -> int:
    """The sampling seed of one rollout: a hash of the run's `sampling_seed` and the task seed, so that two task
    seeds never share a random stream and neighbouring `sampling_seed`s do not shift into each other's."""
    digest = hashlib.sha256(f"{sampling_seed}:{seed}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def rollout_body(*, seed: int, model: str, split: str, cfg: dict[str, Any], target: InferenceTarget) -> dict[str, Any]:
    """The `/rollout` body that goes on the wire for one seed (`rollout_request` as the task-app client sends it)."""
    return wire_body(rollout_request(seed=seed, model=model, split=split, cfg=cfg, target=target))
