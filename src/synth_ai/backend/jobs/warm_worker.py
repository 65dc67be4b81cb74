"""Warm workers: a job worker process started before its job, with the training stack already imported.

A cold worker (`python -m synth_ai.backend.jobs.worker <job_id>`) spends most of a small job's life importing torch,
transformers and peft (9-11 s here). So the scheduler keeps one process ready ahead of time:
`python -m synth_ai.backend.jobs.worker --warm` imports the stack and the trainers, says `ready` on its stdout pipe and
blocks reading a job id from its stdin pipe. When a job is due, the scheduler writes the id; the process sends its
output to the job's `worker.log`, moves into the job's folder and runs the job exactly as a cold worker does (same
signals, PR_SET_PDEATHSIG, exit codes, one process per job, exits when the job ends). The scheduler then starts a
replacement a moment later, so the replacement's imports do not compete with the job's first steps.

The first warm process starts once the backend has a file or a job (an upload comes before a job is created):
a backend that only serves inference, an eval or the dashboard never pays for one. A backend restarted over earlier
jobs starts one at once.

Memory: the waiting process holds the imported stack (about 400 MB RSS here). Turn it off with
SYNTH_AI_BACKEND_WARM_WORKER=0. It is only kept when torch, transformers and peft are installed; a warm process
that cannot import them exits with EXIT_NO_STACK and the backend stops trying. One that dies or does not become
ready in time is replaced (with a growing pause after repeated failures) and jobs meanwhile start cold.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from synth_ai.backend.jobs.process_contract import WORKER_MODULE
from synth_ai.backend.server_settings import BackendSettings

log = logging.getLogger("synth_ai.backend.scheduler")

WARM_FLAG = "--warm"
EXIT_NO_STACK = 3  # the warm process could not import the training stack
STACK = ("torch", "transformers", "peft")
# Imported ahead of a job: the stack, the trainers and the model code the bundled models use (transformers loads
# model classes lazily, on first use).
PRELOAD = ("torch", "transformers", "peft", "synth_ai.backend.trainers.sft.trainer",
           "synth_ai.backend.trainers.sft.data", "synth_ai.backend.trainers.checkpoints", "synth_ai.backend.ml.loading",
           "synth_ai.backend.ml.templates", "synth_ai.backend.store.model_store")
PRELOAD_OPTIONAL = ("synth_ai.backend.trainers.rl", "transformers.models.qwen3.modeling_qwen3",
                    "transformers.models.qwen3_vl.modeling_qwen3_vl", "transformers.models.auto.modeling_auto",
                    "transformers.models.auto.tokenization_auto", "transformers.models.auto.processing_auto",
                    "transformers.models.auto.image_processing_auto", "safetensors.torch")
READY_TIMEOUT_S = 180.0  # a warm process not ready by then is stuck: replace it
RESPAWN_DELAY_S = 3.0  # after a hand-off: let the job's first steps have the CPU
MAX_FAILURES = 5  # consecutive failed warm processes before the backend stops keeping one


# The warm process ----------------------------------------------------------------------------------------------
def preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    for name in PRELOAD_OPTIONAL:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional module missing only means it loads with the job
            pass


def serve(run: Callable[[str], int]) -> int:
    """Body of `python -m synth_ai.backend.jobs.worker --warm`: import, say ready, wait for a job id, then
    `run(job_id)` (the worker's job function)."""
    from synth_ai.backend.jobs.process_contract import EXIT_OK, die_with_parent

    die_with_parent()
    handshake = os.fdopen(os.dup(1), "wb", buffering=0)
    started = time.monotonic()
    try:
        preload()
    except ImportError as exc:
        print(f"warm worker: the training stack cannot be imported: {exc}", file=sys.stderr, flush=True)
        return EXIT_NO_STACK
    print(f"warm worker {os.getpid()}: ready after {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    handshake.write(b"ready\n")
    job_id = sys.stdin.buffer.readline().decode("ascii", "replace").strip()
    if not job_id:  # the scheduler closed the pipe: the backend is stopping or retiring this process
        return EXIT_OK
    job_dir = BackendSettings.load().job_dir(job_id)
    out = os.open(job_dir / "worker.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(job_dir)
    try:
        handshake.write(f"started {job_id}\n".encode())
        handshake.close()
    except OSError:  # the scheduler stopped listening; it already counts this process as the job's worker
        pass
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    return run(job_id)


# The scheduler's side ------------------------------------------------------------------------------------------
class WarmPool:
    """At most one warm process, managed from the scheduler thread only (PR_SET_PDEATHSIG follows the thread
    that forked the process)."""

    def __init__(self, settings: BackendSettings, env: dict[str, str]) -> None:
        self.settings = settings
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.ready = False
        self.started_at = 0.0
        self.next_spawn_at = 0.0
        self.failures = 0
        self.disabled: str | None = None
        if not settings.warm_worker:
            self.disabled = "turned off (SYNTH_AI_BACKEND_WARM_WORKER=0)"
        elif not all(importlib.util.find_spec(name) for name in STACK):
            self.disabled = "the training stack (torch, transformers, peft) is not installed"

    @property
    def log_path(self) -> Path:
        return self.settings.root / "warm_worker.log"

    def warming(self) -> bool:
        """A warm process is importing: a due job is better off waiting for it than starting cold."""
        return self.proc is not None and not self.ready

    def maintain(self, *, wanted: bool = True) -> None:
        """Reap a dead warm process, notice readiness, replace what is missing (only while `wanted`: the backend
        has had a training file or job). Called every scheduler tick."""
        if self.disabled is not None:
            return
        now = time.monotonic()
        if self.proc is not None:
            code = self.proc.poll()
            pid = self.proc.pid
            if code is not None:
                self._discard()
                self._failed(pid, f"exited with code {code}" if code >= 0 else f"was killed by signal {-code}",
                             no_stack=code == EXIT_NO_STACK)
            elif not self.ready:
                self._read_ready()
                if not self.ready and now - self.started_at > READY_TIMEOUT_S:
                    self._discard()
                    self._failed(pid, f"was not ready after {READY_TIMEOUT_S:.0f} s")
        if self.proc is None and self.disabled is None and wanted and now >= self.next_spawn_at:
            self._spawn()

    def take(self, job_id: str) -> subprocess.Popen | None:
        """Hand `job_id` to the ready warm process; None when there is none (the caller starts a cold one)."""
        proc = self.proc
        if proc is None or not self.ready or proc.poll() is not None:
            return None
        self.proc, self.ready = None, False
        self.next_spawn_at = time.monotonic() + RESPAWN_DELAY_S
        try:
            assert proc.stdin is not None
            proc.stdin.write(f"{job_id}\n".encode())
            proc.stdin.close()
        except OSError:
            _kill(proc)
            return None
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
        self.failures = 0
        return proc

    def close(self) -> None:
        if self.proc is not None:
            self._discard()

    # Internals ------------------------------------------------------------------------------------------------
    def _spawn(self) -> None:
        from synth_ai.backend.jobs.process_contract import PARENT_ENV

        env = dict(self.env)
        env[PARENT_ENV] = str(os.getpid())
        try:
            with open(self.log_path, "ab") as err:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", WORKER_MODULE, WARM_FLAG], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=err, env=env, cwd=str(self.settings.root),
                    start_new_session=True, close_fds=True)
        except OSError as exc:
            self.proc = None
            self._failed(None, f"could not be started: {exc}")
            return
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.ready = False
        self.started_at = time.monotonic()
        log.info("started warm worker pid %s", self.proc.pid)

    def _read_ready(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            data = os.read(self.proc.stdout.fileno(), 64)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data.startswith(b"ready"):
            self.ready = True
            log.info("warm worker pid %s ready after %.1f s, RSS %s", self.proc.pid,
                     time.monotonic() - self.started_at, _rss(self.proc.pid))

    def _failed(self, pid: int | None, why: str, *, no_stack: bool = False) -> None:
        self.failures += 1
        if no_stack:
            self.disabled = "the training stack cannot be imported (see warm_worker.log)"
        elif self.failures >= MAX_FAILURES:
            self.disabled = f"{self.failures} warm workers in a row failed (see warm_worker.log)"
        self.next_spawn_at = time.monotonic() + min(60.0, 2.0 ** self.failures)
        log.warning("warm worker pid %s %s; %s", pid, why,
                    f"jobs start cold from now on: {self.disabled}" if self.disabled else "replacing it")

    def _discard(self) -> None:
        proc = self.proc
        assert proc is not None
        if proc.stdin is not None:
            try:
                proc.stdin.close()  # end of input: a waiting warm process exits by itself
            except OSError:
                pass
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            _kill(proc)
        if proc.stdout is not None:
            proc.stdout.close()
        self.proc, self.ready = None, False


def _kill(proc: subprocess.Popen) -> None:
    try:
        proc.send_signal(signal.SIGKILL)
    except (ProcessLookupError, OSError):
        pass
    proc.wait()


def _rss(pid: int) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return f"{int(line.split()[1]) // 1024} MiB"
    except (OSError, ValueError, IndexError):
        pass
    return "unknown"
