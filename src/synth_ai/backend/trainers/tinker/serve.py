"""The `tinker` job's run: one Tinker training client served until its session ends.

The worker loads the client's model (`client_model`), answers the `create_model` future, then takes the client's
requests from the queue (`store.tinker_queue`): its training calls one after another in `seq_id` order, and its
sample calls as they come, each in a thread of its own that hands it to the sampler (`sampling.TinkerSampler`,
continuous batching), so concurrent samples decode together. Training calls and sampling forwards take turns on
the one model under a lock, each with its own adapter weights in place (`adapter_slots`). Every result or error is
stored for `retrieve_future`. A request that fails is answered with its error and the client goes on (the SDK's
clients are not poisoned by one failed call).

It ends when the session is closed (`ServiceClient.close()`), when no heartbeat has come for
`SESSION_TIMEOUT_S` (the SDK sends one every 10 s while its process lives), or when the job is cancelled. Then the
adapter as it stands is saved and registered as the job's fine-tuned model (`ft:<base>:<job id>`: `models export`,
`eval` and the inference endpoint take it), and requests still pending are failed with the reason.

Checkpoints live in the job's work folder: `tinker/weights/<name>/` (`save_state`: the adapter and the Adam state)
and `tinker/sampler_weights/<name>/` (`save_weights_for_sampler`), each a fine-tuned model's folder (a PEFT adapter,
tokenizer, model card) registered in the model store under its `tinker://<model id>/<kind>/<name>` path.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from synth_ai.backend.inference.vllm_options import requested_engine
from synth_ai.backend.server_settings import BackendSettings
from synth_ai.backend.store.db import Database
from synth_ai.backend.store import tinker_checkpoints as checkpoints
from synth_ai.backend.store.tinker_checkpoints import TRAINABLE_FILE
from synth_ai.backend.store.tinker_queue import Request, TinkerQueue, sampler_id_of
from synth_ai.backend.trainers.tinker.adapter_slots import AdapterSlots
from synth_ai.backend.trainers.tinker.client_model import ClientModel
from synth_ai.backend.trainers.tinker.sampling import BuiltinSampleRunner, TinkerSampler
from synth_ai.backend.trainers.job_context import JobReporter, ModelLocator, StopCheck
from synth_ai.config.tinker_settings import read_settings, tinker_path
from synth_ai.config.job_specs import JobSpec
from synth_ai.errors import NotFoundError, SynthError

log = logging.getLogger("synth_ai.backend.tinker")

# the SDK sends a heartbeat every 10 s while its process lives: anything much shorter would end live sessions
HEARTBEAT_S = 10.0
SESSION_TIMEOUT_S = max(float(os.environ.get("SYNTH_AI_TINKER_SESSION_TIMEOUT_S", "120")), 2.5 * HEARTBEAT_S)
IDLE_POLL_S = 0.02
IN_MEMORY = "in_memory_samplers"  # the work folder's copies of save_weights_and_get_sampling_client's weights
SAMPLE_THREADS = 64  # sample calls waiting in the sampler at once (its queue holds more: none is refused)


def run(spec: JobSpec, *, workdir: Path, model_store: ModelLocator, reporter: JobReporter,
        should_stop: StopCheck) -> dict[str, Any]:
    settings = read_settings(spec)
    backend = BackendSettings.load()
    queue = TinkerQueue(Database(backend.db_path))
    create = queue.next_for(settings.model_id, 0)
    try:
        client = ClientModel(settings, model_store)
    except BaseException as exc:
        if create is not None:
            queue.fail(create.id, f"The training client could not be created: {exc}",
                       "user" if isinstance(exc, SynthError) else "server")
        raise
    server = _ClientServer(client, queue, settings, workdir, reporter, backend, model_store)
    if create is not None and create.op == "create_from_state":  # create_training_client_from_state
        server._answer(create)
    elif create is not None:
        queue.finish(create.id, {"model_id": settings.model_id, "type": "create_model"})
    reporter.event("tinker.client.ready", f"Tinker training client {settings.model_id} is ready on "
                   f"{settings.base_model} (LoRA rank {settings.lora_r}).",
                   {"model_id": settings.model_id, "lora_rank": settings.lora_r})
    why = server.serve(should_stop)
    final = Path(workdir) / "final"
    fine_tuned = f"ft:{settings.base_model}:{spec.job_id}"
    with server.lock:
        server.slots.hold(None)
        client.save_final(final, fine_tuned, {"steps": client.steps, "source": "tinker",
                                              "tinker_model_id": settings.model_id})
    model_store.register_fine_tuned(fine_tuned, settings.base_model, spec.job_id, final)
    queue.fail_pending(settings.model_id, f"The training client stopped ({why}).")
    reporter.event("tinker.client.stopped", f"Tinker training client {settings.model_id} stopped: {why}.",
                   {"reason": why, "steps": client.steps})
    return {"fine_tuned_model": fine_tuned, "steps": client.steps, "stopped_because": why}


class _ClientServer:
    def __init__(self, client: Any, queue: TinkerQueue, settings: Any, workdir: Path, reporter: JobReporter,
                 backend: BackendSettings, models: ModelLocator) -> None:
        self.client, self.queue, self.settings, self.reporter = client, queue, settings, reporter
        self.models = models
        self.root = Path(workdir) / "tinker"
        self.backend = backend
        self.lock = threading.Lock()  # the model: one training call or one sampling forward at a time
        self.slots = AdapterSlots(client, self._sampler_file, self.root / IN_MEMORY)
        self.vllm = requested_engine() == "vllm"  # RL's engine setting; the built-in engine otherwise
        self.sampler = TinkerSampler(_loaded(client), self._sample_runner())
        self.sampling: set[str] = set()  # ids of the sample requests handed to the sampler, not yet answered
        self.pool = ThreadPoolExecutor(SAMPLE_THREADS, thread_name_prefix="tinker-sample")

    def _sample_runner(self) -> Any:
        if not self.vllm:
            return BuiltinSampleRunner(self.lock, self.slots.hold, self.client.prompt_logprobs)
        from synth_ai.backend.trainers.tinker.vllm_sampling import VllmSampleRunner, start_llm

        return VllmSampleRunner(lambda: start_llm(self.client), self._adapter_folder)

    def _adapter_folder(self, name: str) -> Path:
        """A sampler's PEFT adapter folder (what vLLM loads): its checkpoint, or the in-memory one's copy."""
        named = self.root / "sampler_weights" / name
        return named if named.is_dir() else self.root / IN_MEMORY / name

    def serve(self, should_stop: StopCheck) -> str:
        try:
            return self._serve(should_stop)
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def _serve(self, should_stop: StopCheck) -> str:
        next_seq, checked = 1, 0.0
        while True:
            if should_stop():
                return "the job was stopped (cancelled, or the backend shut down)"
            if time.monotonic() - checked > 1.0:
                checked = time.monotonic()
                silent = self.queue.session_silent_for(self.settings.session_id)
                if silent is None:
                    return "its session was closed"
                if silent > SESSION_TIMEOUT_S:
                    return f"no heartbeat from its session for {int(silent)} s"
            self._start_samples()
            request = self.queue.next_for(self.settings.model_id, next_seq)
            if request is None:
                time.sleep(IDLE_POLL_S)
                continue
            self._answer(request)
            if request.seq_id is not None:
                next_seq = request.seq_id + 1

    def _start_samples(self) -> None:
        for request in self.queue.pending_samples(self.settings.model_id):
            if request.id not in self.sampling:
                self.sampling.add(request.id)
                self.pool.submit(self._answer, request)

    def _answer(self, request: Request) -> None:
        try:
            if request.op == "sample":
                result = self.sampler.sample(request.body)
            else:
                with self.lock:
                    self.slots.hold(None)  # training calls see the training weights
                    result = self._run(request)
        except SynthError as exc:
            self.queue.fail(request.id, exc.message + (f" {exc.hint}" if exc.hint else ""), "user")
        except Exception as exc:  # the client's future gets the reason; the job goes on
            log.exception("tinker request %s (%s) failed", request.id, request.op)
            self.queue.fail(request.id, f"{type(exc).__name__}: {exc}", "server")
        else:
            self.queue.finish(request.id, result)
        finally:
            self.sampling.discard(request.id)

    def _run(self, request: Request) -> Any:
        body, op, client = request.body, request.op, self.client
        if op in ("forward", "forward_backward"):
            return client.forward_backward(body, backward=op == "forward_backward")
        if op == "optim_step":
            result = client.optim_step(body.get("adam_params"))
            self.reporter.metric("tinker.loss", client.steps, result.pop("loss"))
            return result
        if op == "save_weights":
            return {"path": self._checkpoint("weights", body["name"], client.save_state), "type": "save_weights"}
        if op in ("load_weights", "create_from_state"):
            client.load_state(self._owner_folder(body["owner"], "weights", body["name"]), optimizer=body["optimizer"])
            return {"path": body["path"], "type": "load_weights"}
        if op == "save_weights_for_sampler":
            return self._save_for_sampler(body)
        raise ValueError(f"unknown Tinker operation {op!r}")

    def _save_for_sampler(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("name")
        if name is None:  # save_weights_and_get_sampling_client: weights kept in memory for its sampler
            sampler_id = sampler_id_of(body["session_id"], body["sampling_session_seq_id"])
            name = f"ephemeral-{int(body['sampling_session_seq_id'])}"
            self.slots.add(name, self.client.snapshot())
            if self.vllm:  # vLLM takes adapters from folders only
                self.client.save_adapter(self._folder(IN_MEMORY, name), name)
            self.queue.add_sampler(sampler_id, self.settings.model_id, name)
            return {"sampling_session_id": sampler_id, "type": "save_weights_for_sampler"}
        path = self._checkpoint("sampler_weights", name, self.client.save_adapter)
        self.slots.add(name, self.client.snapshot())
        self.reporter.event("tinker.sampler_weights.saved", f"Sampler weights '{name}' saved.",
                            {"path": path, "steps": self.client.steps})
        return {"path": path, "type": "save_weights_for_sampler"}

    def _checkpoint(self, kind: str, name: str, save: Any) -> str:
        """Write checkpoint `<kind>/<name>` whole (`save(folder, model id)`) and register it in the model store
        under its tinker:// path, which `models export`, eval and the inference endpoint then take."""
        path = self._path(kind, name)
        folder = checkpoints.write(self.root, kind, name, lambda staging: save(staging, path))
        self.models.register_fine_tuned(path, self.settings.base_model, self.settings.job_id, folder)
        return path

    def _sampler_file(self, name: str) -> Path | None:
        path = self.root / "sampler_weights" / name / TRAINABLE_FILE
        return path if path.exists() else None

    def _path(self, kind: str, name: str, owner: str | None = None) -> str:
        return tinker_path(owner or self.settings.model_id, kind, name)

    def _folder(self, kind: str, name: str) -> Path:
        folder = self.root / kind / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _owner_folder(self, owner: str, kind: str, name: str) -> Path:
        if owner == self.settings.model_id:
            root = self.root
        else:
            row = self.queue.model(owner)
            if row is None:
                raise NotFoundError(f"Training client '{owner}' is not known to this backend.")
            root = checkpoints.checkpoints_root(self.backend, row["job_id"])
        found = checkpoints.find(root, kind, name)
        if found is None:
            raise NotFoundError(f"No saved state '{self._path(kind, name, owner)}' on this backend.",
                                hint="Use a path that save_state returned.")
        return found.folder


def _loaded(client: ClientModel) -> Any:
    """The client's model as the inference engine describes a servable one (end-of-turn ids, tokenizer)."""
    from synth_ai.backend.inference.engine import describe_model

    return describe_model(client.settings.model_id, Path(client.tokenizer_path), client.model, client.tokenizer,
                          vision=False, device=str(client.device))
