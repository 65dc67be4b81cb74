"""Fakes of the RL loop's two parts, for the tests of its control flow (ordering, prefetch, outages, limits,
staleness, resumes): `FakeRolloutEngine`, a `RolloutEngine` serving the OpenAI chat-completions route over real HTTP
on 127.0.0.1 (the built-in engine's own server and handler, `inference/policy_server.py`) that answers from a script
instead of a model, and `FakeTrainer`, a `Trainer` (`trainers/rl/run_parts.py`) that counts optimiser steps and
versions and checkpoints a small JSON state, with no model. `FakeRL.parts()` hands both to `run_rl`.
`tests/test_rollout_engine_contract.py` runs the engine contract against the fake as against the real engines, and
`tests/test_rl_run_parts.py` checks both trainers against the `Trainer` protocol.

Tokens are the UTF-8 bytes of the text (prompt: the last user message; completion: the answer), each with
log-prob -0.5, tagged with the version served when the call was answered."""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from synth_ai.backend.inference.policy_server import _handler_for, _PolicyHTTPServer
from synth_ai.backend.inference.rollout_engine import EngineHold, RecordedCall, RolloutEngine
from synth_ai.backend.inference.runner import SampledTokens
from synth_ai.backend.trainers.rl.run_parts import RLParts, Trainer
from synth_ai.backend.trainers.rl.types import Sample
from synth_ai.backend.trainers.rl.update import TrainStats

WAIT_S = 120.0  # bound on every wait a fake does for the loop (a run that never gets there fails, not hangs)
Answer = Callable[[str, str, int], str]  # (last user message, cid, call index within the cid) -> the answer


def color_answer(prompt: str, cid: str, index: int) -> str:
    """A deterministic answer to the color quiz (a function of the cid and the call), right, half right or wrong,
    so that a group of four usually differs in reward."""
    match = re.search(r"What color is the (.+?)\?", prompt)
    thing = match.group(1) if match else "thing"
    options = [f"The {thing} is red.", f"The {thing} is blue.", "red", "I do not know."]
    return options[int(hashlib.sha256(f"{cid}:{index}".encode()).hexdigest(), 16) % len(options)]


def _last_user_text(messages: Any) -> str:
    users = [m for m in messages or [] if isinstance(m, dict) and m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


class FakeRolloutEngine:
    """A `RolloutEngine` answering from `answer` (see the module doc). `first_publish_after_calls = n` makes the
    first `publish` wait until n calls were answered: the overlap of sampling and training that asynchronous GSPO
    allows, made deterministic."""

    version: int
    images_dropped: int
    adapter_versions: dict[int, int] | None = None
    bind_host: str
    path_token: str | None

    def __init__(self, answer: Answer = color_answer, *, model_id: str = "fake-policy", cid_prefix: str = "",
                 first_publish_after_calls: int | None = None) -> None:
        self.model_id = model_id
        self.answer = answer
        self.cid_prefix = cid_prefix
        self.first_publish_after_calls = first_publish_after_calls
        self.version = 0
        self.images_dropped = 0
        self.bind_host = "127.0.0.1"
        self.path_token = None
        self.requests = 0  # calls taken, recorded or not
        self.answered = 0
        self.queued = 0  # calls waiting for a release
        self.syncs = 0
        self.published: list[int] = []
        self._calls: dict[str, list[RecordedCall]] = defaultdict(list)
        self._settled: set[str] = set()
        self._held = False
        self._failure: BaseException | None = None
        self._changed = threading.Condition()
        self._server: _PolicyHTTPServer | None = None

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def fail(self, error: BaseException) -> None:
        """What a dead engine does: the loop ends the attempt with `error` at its next check."""
        self._failure = error

    def start(self) -> str:
        if self._server is None:
            self._server = _PolicyHTTPServer((self.bind_host, 0), _handler_for(self))  # type: ignore[arg-type]
            self._server.daemon_threads = True
            threading.Thread(target=self._server.serve_forever, name="fake-policy", daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/chat/completions"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.close_connections()
            self._server = None
        self.release()  # calls still held end (their connections are gone)

    def sync_weights(self) -> None:
        self.syncs += 1

    def publish(self, version: int) -> None:
        wanted = self.first_publish_after_calls
        if wanted is not None and not self.published:
            with self._changed:
                if not self._changed.wait_for(lambda: self.answered >= wanted, timeout=WAIT_S):
                    raise AssertionError(f"the engine answered {self.answered} calls before the first publish, "
                                         f"not {wanted}")
        self.sync_weights()
        self.published.append(version)
        self.version = version

    def take_calls(self, cid: str) -> list[RecordedCall]:
        with self._changed:
            self._settled.add(cid)
            return sorted(self._calls.pop(cid, []), key=lambda c: c.index)

    def hold(self) -> EngineHold:
        with self._changed:
            self._held = True
        return EngineHold(self.release)

    def release(self) -> None:
        with self._changed:
            self._held = False
            self._changed.notify_all()

    @property
    def held(self) -> bool:
        return self._held

    def wait_until_queued(self, calls: int) -> None:
        """Wait (bounded) until `calls` calls are held."""
        with self._changed:
            assert self._changed.wait_for(lambda: self.queued >= calls, timeout=WAIT_S), (self.queued, calls)

    def complete(self, body: dict[str, Any], cid: str | None) -> dict[str, Any]:
        """What the HTTP handler calls: one chat completion, recorded under `cid` unless it was settled."""
        with self._changed:
            record = bool(cid) and cid not in self._settled
            index = len(self._calls[cid]) if record else 0
            slot = RecordedCall(cid or "", index, dict(body), [])
            if record:
                self._calls[cid].append(slot)
            self.requests += 1
            self.queued += 1
            self._changed.notify_all()
            self._changed.wait_for(lambda: not self._held)
            self.queued -= 1
            version = self.version
        prompt = _last_user_text(body.get("messages"))
        text = self.answer(prompt, (cid or "").removeprefix(self.cid_prefix), index)
        completion_ids = list(text.encode())
        slot.samples = [SampledTokens(prompt_ids=list(prompt.encode()), completion_ids=completion_ids,
                                      logprobs=[-0.5] * len(completion_ids),
                                      temperature=float(body.get("temperature") or 1.0),
                                      forced=[False] * len(completion_ids),
                                      versions=[version] * len(completion_ids))]
        with self._changed:
            self.answered += 1
            self._changed.notify_all()
        return {"id": f"fake-{self.requests}", "object": "chat.completion", "model": body.get("model") or self.model_id,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": len(prompt.encode()), "completion_tokens": len(completion_ids),
                          "total_tokens": len(prompt.encode()) + len(completion_ids)}}


class _BytesTokenizer:
    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


class FakeTrainer:
    """A `Trainer` with no model: `train` takes as many optimiser steps as GSPO would over the samples (one, or
    `micro_batch` x `gradient_accumulation_steps` samples each), moving `version` and calling `after_step` after
    each; its loss is the samples' mean advantage (a number that follows what was trained). Checkpoints are JSON
    files under `<workdir>/fake-checkpoints`, resumed like the real ones (refused with other settings);
    `save_final` writes `<workdir>/final/fake-model.json` and returns the `rl:` id (nothing is registered).
    `during_update(k)` runs inside the k-th `train` (0-based), before its steps: a test waits there for
    what should overlap an update."""

    root_base: str
    adjustment: tuple[str, dict[str, Any]] | None = None
    tokenizer: Any
    where: Any
    dtype_name: str = "float32"
    trainable_count: int = 0
    vision: bool = False
    use_bf16: bool = False
    activation_checkpointing: bool = False
    weight_source: Any = None  # the engine reads no weights from this trainer

    def __init__(self, settings: Any, workdir: Path, during_update: Callable[[int], None] | None = None) -> None:
        self.settings = settings
        self.workdir = Path(workdir)
        self.during_update = during_update
        self.root_base = settings.model_id
        self.tokenizer = _BytesTokenizer()
        self.where = SimpleNamespace(device="cpu")
        self.version = 0
        self.updates = 0
        self.trained: list[list[Sample]] = []  # the samples of each update

    def served(self) -> Any:
        raise AssertionError("the fake trainer has no model to serve: give the loop a fake engine too")

    def train(self, samples: list[Sample], after_step: Callable[[int], None] | None = None) -> TrainStats:
        update, self.updates = self.updates, self.updates + 1
        self.trained.append(list(samples))
        if self.during_update is not None:
            self.during_update(update)
        s = self.settings
        per_step = s.micro_batch * max(1, s.gradient_accumulation_steps) if s.micro_batch else len(samples)
        steps = math.ceil(len(samples) / max(1, per_step))
        for _ in range(steps):
            self.version += 1
            if after_step is not None:
                after_step(self.version)
        loss = sum(x.advantage for x in samples) / max(1, len(samples))
        off_policy = {"mismatch_kl": 0.0, "is_ratio_mean": 1.0, "is_ratio_max": 1.0, "is_truncated_frac": 0.0}
        return TrainStats(loss=loss, clip_fraction=0.0, kl=0.0, ratio_mean=1.0, steps=steps, sequences=len(samples),
                          ref_kl=0.0 if s.kl_coef else None, off_policy=off_policy)

    def _folder(self) -> Path:
        return self.workdir / "fake-checkpoints"

    def checkpoint(self, iteration: int, history: list[dict[str, Any]], last_eval: float | None) -> Path | None:
        from synth_ai.backend.trainers.common import jsonable

        path = self._folder() / f"iteration-{iteration:06d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"fingerprint": jsonable(self.settings.fingerprint()), "iteration": iteration,
                                    "history": jsonable(history), "last_eval": last_eval}))
        return path

    def resume(self, reporter: Any) -> dict[str, Any]:
        from synth_ai.backend.trainers.common import jsonable
        from synth_ai.errors import InvalidInputError

        saved = sorted(self._folder().glob("iteration-*.json"))
        if not saved:
            return {}
        state = json.loads(saved[-1].read_text())
        if state["fingerprint"] != jsonable(self.settings.fingerprint()):
            raise InvalidInputError(f"The checkpoint {saved[-1]} was written with other settings.")
        reporter.event("rl.train.resumed", f"Resumed from the checkpoint after iteration {state['iteration']}.",
                       {"iteration": state["iteration"], "checkpoint": str(saved[-1])})
        return state

    def save_final(self, history: list[dict[str, Any]], last_eval: float | None) -> str:
        final = self.workdir / "final" / "fake-model.json"
        final.parent.mkdir(parents=True, exist_ok=True)
        final.write_text(json.dumps({"iterations": len(history), "last_eval": last_eval}))
        return f"rl:{self.root_base}:{self.settings.job_id}"


@dataclass
class FakeRL:
    """The fakes of one `run_rl`: `parts()` for it; the engine and trainer it made, to look at afterwards."""

    answer: Answer = color_answer
    during_update: Callable[[int], None] | None = None
    first_publish_after_calls: int | None = None
    engines: list[FakeRolloutEngine] = field(default_factory=list)
    trainers: list[FakeTrainer] = field(default_factory=list)

    def parts(self) -> RLParts:
        return RLParts(make_trainer=self._trainer, make_engine=self._engine)

    def _trainer(self, settings: Any, model_store: Any, workdir: Path) -> Trainer:
        self.trainers.append(FakeTrainer(settings, workdir, self.during_update))
        return self.trainers[-1]

    def _engine(self, settings: Any, trainer: Trainer, spec: Any, reporter: Any, ranks: int) -> RolloutEngine:
        self.engines.append(FakeRolloutEngine(self.answer, model_id=settings.model_id,
                                              cid_prefix=f"{settings.job_id}-",
                                              first_publish_after_calls=self.first_publish_after_calls))
        return self.engines[-1]
