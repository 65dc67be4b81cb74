"""`SplitRolloutEngine`: the rollout engine of the split topology, as the trainer's process sees it. It implements the
`RolloutEngine` protocol (`rollout_engine.py`) the RL loop uses, but the policy is served by a separate inference
process (`split_process.py`) on its own devices, with the built-in engine or (`vllm` options given) vLLM: task apps call that process's URL directly, and this object only
gives it orders over a pipe and sends it weights through the weight transfer (`weight_transfer.py`).

- `publish(v)` sends the trainer's weights (a LoRA policy merged for the copy) with version `v` and returns once the
  inference process has them in place; its tokens from then on carry `v`, so asynchronous GSPO's staleness bound
  and importance weights (`trainers/rl/staleness.py`, `off_policy.py`) read the same versions as with a colocated
  engine. `sync_weights()` sends them at the current version. The first publish happens at construction: the
  inference process loaded the base model from its folder, and the policy may already differ (a resume, LoRA).
- `take_calls`, `hold`, `release` are the same orders given to the inference process.
- `failure` is set once the inference process has ended or stopped answering (`InferenceProcessLost`): the loop
  ends the attempt and the job worker exits with EXIT_RESUME (70), so the scheduler resumes the job from its last
  checkpoint in a new worker, with a new inference process, while attempts are left (docs/scale.md). An order given
  to a lost process raises the same error at once; nothing waits on a dead process.
- `close()` stops the inference process (its stdin closed, then SIGTERM, then SIGKILL) and removes the transfer's
  files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

from synth_ai.backend.inference.engine import LoadedModel
from synth_ai.backend.inference.rollout_engine import EngineHold, RecordedCall
from synth_ai.backend.inference.weight_transfer import WeightTransfer, plain_weights, transfer_for
from synth_ai.errors import UnavailableError

_RANK_VARIABLES = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                   "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
START_TIMEOUT_S = float(os.environ.get("SYNTH_AI_INFERENCE_START_S", "600"))


class InferenceProcessLost(UnavailableError):
    """The split topology's inference process ended or cannot be reached; a new worker starts a new one."""

    resume_in_new_worker = True  # jobs.worker exits with EXIT_RESUME: the job resumes from its checkpoint


class SplitRolloutEngine:
    """The `RolloutEngine` of the split topology (see the module doc)."""

    version: int
    images_dropped: int
    bind_host: str
    path_token: str | None
    adapter_versions: dict[int, int] | None = None  # the inference process serves merged weights, never an adapter

    def __init__(self, loaded: LoadedModel, *, devices: tuple[str, ...] = ("cpu",), seed: int = 0,
                 max_images: int | None = None, cid_prefix: str = "", transfer: str | None = None,
                 vllm: dict[str, Any] | None = None, bf16: bool = False, weight_source: Any = None) -> None:
        self.trainer_model = loaded.model
        # a sharded (FSDP) trainer's `loaded` is its unsharded sampling copy: `weight_source` gathers the current
        # weights into it before each send
        self.weight_source = weight_source
        self.devices = devices
        self.version = 0
        self.images_dropped = 0
        self.bind_host = "127.0.0.1"
        self.path_token: str | None = None
        self._lost: InferenceProcessLost | None = None
        self._closing = False
        self._lock = threading.Lock()  # one order at a time on the pipe
        self.transfer: WeightTransfer = transfer_for(devices[0], transfer)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "synth_ai.backend.inference.split_process"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=_child_env(devices), text=True, bufsize=1)
        config = {"model_path": str(loaded.path), "model_id": loaded.model_id, "seed": seed,
                  "max_images": max_images, "cid_prefix": cid_prefix, "transfer": self.transfer.describe(),
                  "vllm": vllm, "bf16": bf16}
        try:
            self.process.stdin.write(json.dumps(config) + "\n")
            self.process.stdin.flush()
            self._read(START_TIMEOUT_S, "starting")  # the ready line
            self.sync_weights()
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def failure(self) -> InferenceProcessLost | None:
        if self._lost is None and not self._closing and self.process.poll() is not None:
            self._lost = InferenceProcessLost(_ended(self.process))
        return self._lost

    # RolloutEngine ------------------------------------------------------------------------------------------
    def start(self) -> str:
        return self._order({"op": "start", "bind_host": self.bind_host, "path_token": self.path_token})["url"]

    def publish(self, version: int) -> None:
        """The trainer's current weights, as version `version`, in place in the inference process."""
        if self.failure is not None:
            raise self.failure
        if self.weight_source is not None:
            self.weight_source(self.trainer_model)
        with plain_weights(self.trainer_model) as weights:
            answer = self.transfer.send(weights, version, lambda ticket: self._order({"op": "publish",
                                                                                       "ticket": ticket}))
        if answer.get("version") != version:
            raise self._lose(f"the inference process reports version {answer.get('version')} after a publish of "
                             f"version {version}")
        self.version = version

    def sync_weights(self) -> None:
        self.publish(self.version)

    def take_calls(self, cid: str) -> list[RecordedCall]:
        from synth_ai.backend.inference.split_process import decode_calls

        answer = self._order({"op": "take", "cid": cid})
        self.images_dropped += int(answer.get("images_dropped", 0))
        return decode_calls(answer["calls"])

    def hold(self) -> EngineHold:
        self._order({"op": "hold"})
        return EngineHold(self.release)

    def release(self) -> None:
        if self.failure is None:  # a lost process samples nothing: nothing to release
            self._order({"op": "release"})

    def close(self) -> None:
        self._closing = True
        if self.process.poll() is None:
            try:
                self.process.stdin.close()  # the inference process exits when its stdin closes
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.terminate()
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        self.transfer.close()

    # The pipe -----------------------------------------------------------------------------------------------
    def _order(self, order: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        with self._lock:
            if self.failure is not None:
                raise self.failure
            try:
                self.process.stdin.write(json.dumps(order) + "\n")
                self.process.stdin.flush()
            except OSError as exc:
                raise self._lose(f"the inference process cannot take orders ({exc})") from None
            answer = self._read(timeout_s, order["op"])
        if "error" in answer:
            raise UnavailableError(f"The inference process refused {order['op']!r}: {answer['error']}")
        return answer

    def _read(self, timeout_s: float | None, doing: str) -> dict[str, Any]:
        """The next answer line; a process that ends (EOF) or stays silent past `timeout_s` is lost."""
        if timeout_s is None:  # a process that dies closes the pipe: the read ends with EOF
            line = self.process.stdout.readline()
        else:
            got: dict[str, str] = {}
            reader = threading.Thread(target=lambda: got.setdefault("line", self.process.stdout.readline()),
                                      daemon=True)
            reader.start()
            reader.join(timeout_s)
            line = got.get("line", "")
            if reader.is_alive():
                self.process.kill()
                raise self._lose(f"the inference process did not answer {doing!r} within {timeout_s:.0f} s")
        if not line:
            self.process.wait(timeout=30)
            raise self._lose(_ended(self.process) + f" while {doing!r} was in progress")
        return json.loads(line)

    def _lose(self, reason: str) -> InferenceProcessLost:
        self._lost = self._lost or InferenceProcessLost(reason)
        return self._lost


def _ended(process: subprocess.Popen) -> str:
    code = process.poll()
    if code is None:
        return f"the inference process (pid {process.pid}) stopped answering"
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    return f"the inference process (pid {process.pid}) {how}; its output is in the job's log"


def _child_env(devices: tuple[str, ...]) -> dict[str, str]:
    """The trainer's environment less torchrun's rank variables (the inference process is no rank of the trainer's
    group; vLLM would read them), with the inference process's GPUs as the only visible ones (indices read through
    the trainer's own CUDA_VISIBLE_DEVICES when it has one)."""
    env = {k: v for k, v in os.environ.items() if k not in _RANK_VARIABLES and not k.startswith("TORCHELASTIC_")}
    gpus = [d.split(":", 1)[1] for d in devices if d.startswith("cuda:")]
    if gpus:
        visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible[int(g)] if visible else g for g in gpus)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU: the inference process must not take a GPU
    return env
