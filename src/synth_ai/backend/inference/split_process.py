"""The inference process of the split topology: `python -m synth_ai.backend.inference.split_process`, started by
`split_engine.SplitRolloutEngine` in the trainer's process, on its own devices (CUDA_VISIBLE_DEVICES set by the
trainer; the CPU otherwise).

It loads the policy's base model from its folder, serves it with the built-in engine (`BuiltinRolloutEngine`: the
same HTTP endpoint, chat template, batching and call recording as a colocated job) or, when the trainer passes `[vllm]`
options, with vLLM (`VllmRolloutEngine`, its engine core in this process) and takes the trainer's orders
as JSON lines on stdin, answering each with one JSON line on the channel the trainer reads (the process's original
stdout; everything else it prints goes to stderr, the job's log):

    {"op": "start", "bind_host": ..., "path_token": ...}   -> {"url": the chat-completions URL}
    {"op": "publish", "ticket": ...}                        -> {"version": v}  weights in place, new tokens tagged v
    {"op": "take", "cid": ...}                              -> {"calls": base64 of torch.save(...), "images_dropped": n}
    {"op": "hold"} / {"op": "release"}                      -> {}
    any failure                                             -> {"error": "<type>: <message>"}

The weights arrive through the weight transfer the trainer described (`weight_transfer.transfer_from`) and are
copied into the served model under the engine's generate lock, between two decoding steps (with vLLM: into the host
model, then into vLLM's by its own publish). When vLLM fails while sampling the process exits (EXIT_ENGINE_LOST)
after answering the order at hand, so the trainer sees it end. When stdin closes (the
trainer's process ended, however it ended) the process exits: an inference process never outlives its trainer.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

READY = "ready"
EXIT_ENGINE_LOST = 3  # the engine (vLLM) can sample no more


def _load(config: dict[str, Any]) -> Any:
    from synth_ai.backend.inference.engine import InferenceEngine
    from synth_ai.backend.ml import loading

    class OneFolder:
        def resolve(self, model_id: str) -> Path:
            return Path(config["model_path"])

    loading.configure_threads(tiny=loading.is_tiny_folder(Path(config["model_path"])))
    return InferenceEngine(OneFolder(), max_loaded=1).get(config["model_id"])


class InferenceProcess:
    """The served engine and the orders it takes (see the module doc)."""

    def __init__(self, config: dict[str, Any]) -> None:
        from synth_ai.backend.inference.weight_transfer import transfer_from

        loaded = _load(config)
        self.host = loaded.model  # where the transfer's weights land (the built-in engine serves it)
        common = {"seed": config.get("seed", 0), "max_images": config.get("max_images"),
                  "cid_prefix": config.get("cid_prefix", "")}
        self.vllm = config.get("vllm") is not None
        if self.vllm:  # vLLM samples; it takes the weights from `host` on every publish, in memory
            from synth_ai.backend.inference.vllm_engine import VllmRolloutEngine
            from synth_ai.backend.inference.vllm_options import VllmOptions

            self.engine = VllmRolloutEngine(loaded, VllmOptions(**config["vllm"]), bf16=bool(config.get("bf16")),
                                            cpu=loaded.device != "cuda", **common)
        else:
            from synth_ai.backend.inference.policy_server import BuiltinRolloutEngine

            self.engine = BuiltinRolloutEngine(loaded, share_weights=True, **common)
        self.transfer = transfer_from(config["transfer"])

    def handle(self, order: dict[str, Any]) -> dict[str, Any]:
        op = order.get("op")
        if op == "start":
            self.engine.bind_host = order.get("bind_host") or "127.0.0.1"
            self.engine.path_token = order.get("path_token")
            return {"url": self.engine.start()}
        if op == "publish":
            return {"version": self._publish(order["ticket"])}
        if op == "take":
            return self._take(order["cid"])
        if op == "hold":
            self.engine.hold()
            return {}
        if op == "release":
            self.engine.release()
            return {}
        raise ValueError(f"no order {op!r}")

    def _publish(self, ticket: dict[str, Any]) -> int:
        import torch

        version, weights = self.transfer.receive(ticket)
        if self.vllm:  # vLLM holds its own copy: fill the host model, then vLLM copies it under its lock
            with torch.no_grad():
                self.host.load_state_dict(weights, strict=True)
            self.engine.publish(version)
            return version
        with self.engine.engine._generate_lock, torch.no_grad():  # between two decoding steps
            self.host.load_state_dict(weights, strict=True)
            self.engine.served.policy_version = version
            self.engine.version = version
        return version

    def _take(self, cid: str) -> dict[str, Any]:
        import torch

        calls = [{"cid": c.cid, "index": c.index, "request": c.request,
                  "samples": [dataclasses.asdict(s) for s in c.samples]} for c in self.engine.take_calls(cid)]
        dropped, self.engine.images_dropped = self.engine.images_dropped, 0
        buffer = io.BytesIO()
        torch.save(calls, buffer)
        return {"calls": base64.b64encode(buffer.getvalue()).decode("ascii"), "images_dropped": dropped}

    def close(self) -> None:
        self.engine.close()
        self.transfer.close()


def decode_calls(encoded: str) -> list[Any]:
    """The trainer's side of a `take` answer: `RecordedCall`s with their `SampledTokens`."""
    import torch

    from synth_ai.backend.inference.rollout_engine import RecordedCall
    from synth_ai.backend.inference.runner import SampledTokens

    raw = torch.load(io.BytesIO(base64.b64decode(encoded)), weights_only=True)
    return [RecordedCall(c["cid"], c["index"], c["request"], [SampledTokens(**s) for s in c["samples"]])
            for c in raw]


def main() -> int:
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt the channel
    config = json.loads(sys.stdin.readline())
    process = InferenceProcess(config)
    lock = threading.Lock()

    def answer(doc: dict[str, Any]) -> None:
        with lock:
            channel.write(json.dumps(doc) + "\n")

    answer({READY: True, "pid": os.getpid()})
    try:
        for line in sys.stdin:  # EOF: the trainer is gone
            order = json.loads(line)
            try:
                reply = process.handle(order)
            except Exception as exc:  # noqa: BLE001 - the trainer gets the reason and decides
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            answer({"id": order.get("id"), **reply})
            if process.engine.failure is not None:  # vLLM failed while sampling: the trainer sees this process end
                print(f"the inference process's engine failed: {process.engine.failure}", file=sys.stderr, flush=True)
                return EXIT_ENGINE_LOST
    finally:
        process.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
