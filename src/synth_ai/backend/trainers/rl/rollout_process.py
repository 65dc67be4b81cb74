"""The rollout runner in a process of its own, so that the task app's HTTP traffic does not share the trainer's GIL.

The trainer's process is CPU-bound on one core: the GSPO update, generation, the policy server's request threads and
the rollout client (the `/rollout` calls: an event loop, JSON in and out, socket work) take turns on one GIL. During
an overlapped update (`prefetch`) the rollout client's work stretches the update by as much as it costs, while the
machine's other cores mostly wait. `RolloutProcess` runs the same `RolloutRunner` in a child process (a plain
`python -c`: no torch, no model, no copy of the trainer's memory) and talks to it over a pipe: the trainer sends an
iteration's jobs and gets its rollouts back (rewards and the task app's answers read there), then attaches the LLM
calls its policy server recorded under each attempt's cid (`rollouts.attach_calls`, as the in-process runner does
after each attempt). Retries, timeouts and the failure accounting are the runner's own, unchanged.

A stop (`should_stop`, or `abandon()` for a prefetch the loop leaves) is polled here every `STOP_POLL_S` and sent to
the child, which cancels its rollouts the way the in-process runner does; the child ends when its pipe closes, so it
does not outlive a trainer that was killed. SYNTH_AI_RL_ROLLOUT_PROCESS=0 keeps the runner in the trainer's process
(`make_runner`).
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from synth_ai.backend.inference.rollout_engine import RolloutEngine
from synth_ai.backend.trainers.rl.policy_exposure import policy_url
from synth_ai.backend.trainers.rl.rollouts import STOP_POLL_S, RolloutRunner, RolloutsStopped, attach_calls
from synth_ai.backend.trainers.rl.types import Rollout

PROCESS_ENV = "SYNTH_AI_RL_ROLLOUT_PROCESS"
CLOSE_TIMEOUT_S = 5.0
# Signals meant for the trainer (a Ctrl-C, or torchrun's SIGTERM to a rank's process group) are its to act on: it
# stops the rollouts through the pipe, and the child leaves when the pipe closes. Ignored before any import.
CHILD_MAIN = ("import signal, sys; [signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)]; "
              "from multiprocessing.connection import Connection; "
              "from synth_ai.backend.trainers.rl.rollout_process import serve; serve(Connection(int(sys.argv[1])))")


class RolloutProcessDied(RuntimeError):
    """The child running the rollouts ended without answering (killed, or out of memory)."""


def make_runner(settings: Any, engine: RolloutEngine, api_key: str | None, should_stop: Callable[[], bool]) -> Any:
    """The job's rollout runner: in a child process (the default), or in this one with SYNTH_AI_RL_ROLLOUT_PROCESS=0."""
    if os.environ.get(PROCESS_ENV, "1").strip() == "0":
        return RolloutRunner(settings, engine, api_key, should_stop)
    return RolloutProcess(settings, engine, api_key, should_stop)


class RolloutProcess:
    """`RolloutRunner`'s interface (`policy_url`, `run`, `abandon`, `close`) over a child process."""

    def __init__(self, settings: Any, engine: RolloutEngine, api_key: str | None,
                 should_stop: Callable[[], bool]) -> None:
        self.settings = settings
        self.engine = engine
        self.should_stop = should_stop
        self.policy_url = policy_url(engine)  # started here: the child only needs its address
        # a plain child, not multiprocessing's spawn: that re-imports the parent's
        # __main__, which a script calling run_rl may not guard
        parent_end, child_end = socket.socketpair()
        self._process = subprocess.Popen([sys.executable, "-c", CHILD_MAIN, str(child_end.fileno())],
                                         pass_fds=[child_end.fileno()], stdin=subprocess.DEVNULL, env=_child_env())
        child_end.close()
        self._conn = Connection(parent_end.detach())
        self._conn.send((settings, api_key, self.policy_url))
        self._lock = threading.Lock()  # one run at a time: a prefetch's thread and the loop's take turns
        self._abandoned = False

    def abandon(self) -> None:
        """The run in flight is cancelled at its next poll, and no other starts."""
        self._abandoned = True

    def run(self, jobs: list[tuple[int, int, str]], *, mode: str, extra_policy: dict[str, Any] | None = None
            ) -> list[Rollout]:
        with self._lock:
            if self._abandoned:
                raise RolloutsStopped()
            kind, payload = self._ask(("run", jobs, mode, extra_policy))
        if kind == "stopped":
            raise RolloutsStopped()
        if kind == "error":
            raise payload
        for result in payload:  # the calls each attempt made, recorded by this process's policy server
            for cid in result.attempt_cids[:-1]:
                self.engine.take_calls(cid)
            if result.attempt_cids:
                attach_calls(result, self.engine.take_calls(result.attempt_cids[-1]))
        return payload

    def _ask(self, message: tuple[Any, ...]) -> tuple[str, Any]:
        try:
            self._conn.send(message)
            asked_to_stop = False
            while not self._conn.poll(STOP_POLL_S):
                if not asked_to_stop and (self._abandoned or self.should_stop()):
                    self._conn.send(("stop",))
                    asked_to_stop = True
                if self._process.poll() is not None:
                    break
            if self._conn.poll(0):
                return self._conn.recv()
        except (EOFError, OSError):
            pass
        raise RolloutProcessDied(f"the process running the rollouts ended (exit code {self._process.poll()}); "
                                 f"set {PROCESS_ENV}=0 to run them in the trainer's process")

    def close(self) -> None:
        try:
            self._conn.close()  # the child reads EOF and leaves
        except OSError:
            pass
        try:
            self._process.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(CLOSE_TIMEOUT_S)


def _child_env() -> dict[str, str]:
    """This environment, with the folder this synth_ai was imported from first on the child's path."""
    import synth_ai

    source = str(Path(synth_ai.__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([source, rest]) if rest else source}


class _ChildRunner(RolloutRunner):
    def _settle(self, result: Rollout, cid: str) -> None:
        pass  # the trainer's process settles the cids it gets back (`RolloutProcess.run`)


def serve(conn: Any) -> None:
    """The child: run each batch of jobs it is sent and send the rollouts back, until its pipe closes."""
    try:
        settings, api_key, url = conn.recv()
    except (EOFError, OSError):
        return
    stop = threading.Event()
    work: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()

    def listen() -> None:  # a stop must be seen while a run is in flight
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                stop.set()
                work.put(None)
                return
            if message[0] == "stop":
                stop.set()
            else:  # a stop sent for the previous run came before this message; one for this run comes after it
                stop.clear()
                work.put(message)

    threading.Thread(target=listen, name="rl-rollouts-listen", daemon=True).start()
    runner = _ChildRunner(settings, None, api_key, stop.is_set, url=url)  # the parent started the engine
    while (message := work.get()) is not None:
        _, jobs, mode, extra_policy = message
        try:
            answer: tuple[str, Any] = ("done", runner.run(jobs, mode=mode, extra_policy=extra_policy))
        except RolloutsStopped:
            answer = ("stopped", None)
        except Exception as exc:  # noqa: BLE001 - raised in the trainer's process by RolloutProcess.run
            answer = ("error", RuntimeError(f"rollouts failed: {type(exc).__name__}: {exc}"))
        try:
            conn.send(answer)
        except (EOFError, OSError):
            return

