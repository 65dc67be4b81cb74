"""The two servers the demo needs: the embedded backend (reused when one runs) and the bundled task app.

The demo stops only what it started: a backend that was already running stays up, and so does everything when
`--keep` is given. Neither takes a port that another program holds: each uses its usual port (8000, 8001) when it
is free and a free one otherwise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from synth_ai.errors import NetworkError, SynthError
from synth_ai.taskapp.serving import DEFAULT_PORT as TASK_APP_PORT  # tried first, as `synth-ai serve` would

TASK_APP_START_TIMEOUT_S = 60.0
TASK_APP_START_ATTEMPTS = 3  # a port taken between the check and the bind: try another
MODEL_WARM_TIMEOUT_S = 600.0


@dataclass
class Services:
    say: Callable[[str], None]
    backend: dict[str, Any] = field(default_factory=dict)
    started_backend: bool = False
    task_app: subprocess.Popen | None = None
    task_url: str | None = None

    def start_backend(self) -> dict[str, Any]:
        from synth_ai.backend.server_settings import BackendSettings
        from synth_ai.connect.embedded_backend import start_embedded_backend

        doc = start_embedded_backend(BackendSettings.load(), self.say)
        self.started_backend = not doc.get("already_running")
        self.backend = doc
        verb = "started" if self.started_backend else "reusing the running"
        self.say(f"Embedded backend: {verb} backend at {doc['url']} (pid {doc['pid']}).")
        return doc

    def warm_model(self, model: str) -> None:
        """Build (first use only) and load the model before rollouts start: a cold tiny model takes longer to build
        than a task app waits for one answer, and every concurrent first rollout would time out."""
        import httpx

        from synth_ai.client.connect import connect
        from synth_ai.client.transport import RetryPolicy, Transport
        from synth_ai.env.backend_url import BackendTarget

        self.say(f"Loading {model} (built on first use; about a minute on 2 cores) ...")
        target = BackendTarget(self.backend["api_base"], "embedded default", True)
        api = connect(target, transport_factory=lambda *args, **kwargs: Transport(
            *args, timeout=httpx.Timeout(MODEL_WARM_TIMEOUT_S, connect=10.0), retry=RetryPolicy(max_retries=0),
            **kwargs))
        try:  # one attempt: a model that fails to load fails again, and the log says why
            api.chat_completion({"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1})
        except SynthError as exc:
            raise NetworkError(f"The embedded backend could not load {model}: {exc.message}",
                               hint=f"See the backend log: {self.backend.get('log_file')}") from None
        finally:
            api.close()

    def serve_task_app(self, app_id: str, *, env: dict[str, str], cwd: Path, log_file: Path) -> str:
        """`synth-ai serve <app_id> --port <port>` in the background, on `synth-ai serve`'s port (8001) when it is
        free and on a free one otherwise; returns its URL once /health answers with this run's key. A port found
        free can still be taken before the task app binds it (another demo starting at the same moment): the app
        then exits, and it is started again on another free port."""
        from synth_ai.ports import any_free_port, preferred_or_free_port

        port = preferred_or_free_port("127.0.0.1", TASK_APP_PORT)
        for attempt in range(1, TASK_APP_START_ATTEMPTS + 1):
            url = self._start_task_app(app_id, port, env=env, cwd=cwd, log_file=log_file,
                                       last=attempt == TASK_APP_START_ATTEMPTS)
            if url is not None:
                break
            port = any_free_port("127.0.0.1")
        assert url is not None  # the last attempt returns a URL or raises
        self.task_url = url
        return url

    def _start_task_app(self, app_id: str, port: int, *, env: dict[str, str], cwd: Path, log_file: Path,
                        last: bool) -> str | None:
        """The task app's URL once it answers; None when it exited while starting and `last` is False."""
        import httpx

        argv = [sys.executable, "-m", "synth_ai", "serve", app_id, "--host", "127.0.0.1", "--port", str(port)]
        self.say(f"$ synth-ai serve {app_id} --port {port}   (task app, in the background; log {log_file})")
        with open(log_file, "ab") as log:
            self.task_app = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        headers = {"X-API-Key": env.get("ENVIRONMENT_API_KEY", "")}  # another program on the port will not say 200
        deadline = time.monotonic() + TASK_APP_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.task_app.poll() is not None:
                if not last:
                    return None
                raise NetworkError(f"The task app {app_id} exited while starting (exit {self.task_app.returncode}).",
                                   hint=f"See its log: {log_file}")
            try:
                if httpx.get(f"{url}/health", headers=headers, timeout=2.0).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise NetworkError(f"The task app {app_id} did not answer within {TASK_APP_START_TIMEOUT_S:.0f}s.",
                           hint=f"See its log: {log_file}")

    def stop(self, *, keep: bool) -> list[str]:
        """Stop what the demo started (nothing with `keep`); returns what it stopped, for the summary."""
        stopped: list[str] = []
        if keep:
            return stopped
        if self.task_app is not None and self.task_app.poll() is None:
            try:
                os.killpg(self.task_app.pid, signal.SIGTERM)
                self.task_app.wait(timeout=15)
            except (ProcessLookupError, PermissionError):
                pass
            except subprocess.TimeoutExpired:
                self.task_app.kill()
                self.task_app.wait()
            stopped.append("task app")
        if self.started_backend:
            from synth_ai.connect.embedded_backend import stop_embedded_backend

            stop_embedded_backend()
            stopped.append("backend")
        return stopped
