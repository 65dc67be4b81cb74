"""What every request handler shares: one `Backend` per server (database, blob store, file and job services,
scheduler, key checker, the lazily built inference engine), how a route gets it, and the API-key check."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import Request

from synth_ai.backend.api.auth import KeyChecker, bearer_token
from synth_ai.backend.api.changes import ChangeWatcher
from synth_ai.backend.api.dashboard_auth import LoginTokens, cookie_key
from synth_ai.backend.executors import Executors
from synth_ai.backend.http_errors import ApiError
from synth_ai.backend.jobs.scheduler import Scheduler
from synth_ai.backend.server_settings import BackendSettings
from synth_ai.backend.store.blobs import BlobStore
from synth_ai.backend.store.db import Database
from synth_ai.backend.store.files import FileService
from synth_ai.backend.store.job_records import JobStore
from synth_ai.env.backend_keys import ensure_keys

log = logging.getLogger("synth_ai.backend")


class Backend:
    """Everything a request handler needs, created once per server."""

    def __init__(self, settings: BackendSettings) -> None:
        self.settings = settings
        settings.ensure_dirs()
        self.db = Database(settings.db_path)
        self.blobs = BlobStore(settings.blobs_dir, settings.tmp_dir)
        self.files = FileService(self.db, self.blobs)
        self.jobs = JobStore(self.db)
        self.changes = ChangeWatcher(settings.db_path)  # wakes live job streams (routes/job_stream.py)
        self.scheduler = Scheduler(settings, self.db, Executors(settings.executor))
        self.keys = KeyChecker(settings.data_dir)
        self.login_tokens = LoginTokens()
        self.validation_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="synth-ai-validate")
        self.blob_lock = threading.Lock()  # blob commit + row insert vs row delete + blob delete
        self._engine: Any = None
        self._model_store: Any = None
        self._engine_lock = threading.Lock()

    def startup(self) -> None:
        self.db.migrate()
        ensure_keys(self.settings.data_dir)
        removed = self.blobs.clean_tmp()
        if removed:
            log.info("removed %d partial upload(s) left by a previous run", removed)
        for file_id in self.files.pending_validation():
            self.validation_pool.submit(self.files.validate, file_id)
        for action in self.scheduler.settle_on_startup():
            log.info("settled job %s: %s", action["job_id"], action["action"])
        self.scheduler.start()

    def shutdown(self) -> None:
        self.scheduler.shutdown(timeout=self.settings.cancel_grace_s)
        self.validation_pool.shutdown(wait=False, cancel_futures=True)
        engine = self._engine
        if engine is not None and hasattr(engine, "close"):
            try:
                engine.close()
            except Exception:  # noqa: BLE001
                log.exception("closing the inference engine failed")
        self.db.close()

    # Lazily created ML pieces (the inference engine imports torch only when first used) -------------------------
    @property
    def model_store(self) -> Any:
        if self._model_store is None:
            from synth_ai.backend.store.model_store import ModelStore

            self._model_store = ModelStore(self.settings.data_dir)
        return self._model_store

    def engine(self) -> Any:
        with self._engine_lock:
            if self._engine is None:
                self._engine = self._new_engine()
            return self._engine

    def _new_engine(self) -> Any:
        """The inference engine SYNTH_AI_INFERENCE_ENGINE names (`server_settings`)."""
        if self.settings.inference_engine == "vllm":
            from synth_ai.backend.inference.vllm_serving import VllmInferenceEngine
            from synth_ai.backend.ml.loading import placement

            return VllmInferenceEngine(self.model_store, cpu=placement().device != "cuda")
        from synth_ai.backend.inference.engine import InferenceEngine

        return InferenceEngine(self.model_store)


def get_backend(request: Request) -> Backend:
    return request.app.state.backend


def require_auth(request: Request) -> None:
    backend: Backend = request.app.state.backend
    token = bearer_token(request.headers.get("authorization"))
    if token is None:  # the dashboard: its cookie, with the header a cross-site request cannot send
        token = cookie_key(request.cookies, request.headers)
    if token is None:
        raise ApiError(401, "unauthorized", "Missing API key: send `Authorization: Bearer <key>`.",
                       hint=_key_hint(backend), headers={"WWW-Authenticate": "Bearer"})
    if not backend.keys.check(token):
        raise ApiError(401, "unauthorized", "Invalid API key for this backend.",
                       hint=_key_hint(backend), headers={"WWW-Authenticate": "Bearer"})


def _key_hint(backend: Backend) -> str:
    return (f"The embedded backend's keys are in {backend.settings.data_dir / 'backend_keys.json'}; "
            "`synth-ai setup --local` writes one into your .env as SYNTH_API_KEY.")
