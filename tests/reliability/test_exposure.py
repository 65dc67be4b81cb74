"""Exposure: on an address other machines can reach, the backend and task apps start only when a key guards them;
`/docs` and `/openapi.json` need the same key as the API, on every address."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest
from conftest import free_port, run_cli

from synth_ai.env.exposure import is_loopback
from synth_ai.errors import AuthError

ENV_KEY = "sk_env_exposure_0123456789abcdef"


def _serve_backend(data_dir, host: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = dict(os.environ, SYNTH_AI_HOME=str(data_dir), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "synth_ai", "backend", "serve", "--host", host, "--port", str(port),
                             "--log-level", "warning"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc, port


def test_backend_on_an_exposed_address_refuses_to_start_before_it_has_a_key(tmp_path):
    data = tmp_path / "data"
    for command in ("serve", "start"):
        env = dict(os.environ, SYNTH_AI_HOME=str(data))
        result = subprocess.run([sys.executable, "-m", "synth_ai", "backend", command, "--host", "0.0.0.0",
                                 "--port", str(free_port())], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 4, (command, result.stdout, result.stderr)
        assert "Refusing to start the backend on 0.0.0.0" in result.stderr
        assert "synth-ai setup --local" in result.stderr
    assert not (data / "backend_keys.json").exists()  # no key was made up while exposed


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"], ids=["loopback", "exposed"])
def test_backend_docs_and_schema_need_the_key(tmp_path, host):
    from synth_ai.env.backend_keys import ensure_keys

    data = tmp_path / "data"
    key = ensure_keys(data)  # on the exposed address a key must exist before the start
    proc, port = _serve_backend(data, host)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the backend did not start"
            time.sleep(0.1)
        for path in ("/docs", "/openapi.json", "/api/files", "/redoc"):
            anonymous = httpx.get(base + path, timeout=10)
            assert anonymous.status_code in (401, 404), (path, anonymous.status_code)
            assert "paths" not in anonymous.text
        assert httpx.get(f"{base}/openapi.json", headers={"Authorization": "Bearer sk_local_wrong"}).status_code == 401
        auth = {"Authorization": f"Bearer {key}"}
        schema = httpx.get(f"{base}/openapi.json", headers=auth, timeout=10)
        assert schema.status_code == 200 and "/api/files" in schema.json()["paths"]
        page = httpx.get(f"{base}/docs", headers=auth, timeout=10)
        assert page.status_code == 200 and "/openapi.json" in page.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _toy_config(*, require_api_key: bool = True):
    from synth_ai.taskapp import TaskAppConfig, TaskInfo

    info = TaskInfo(task={"id": "toy", "name": "Toy", "version": "0.1"}, environment="toy",
                    dataset={"id": "toy", "splits": ["train"]})
    return TaskAppConfig(app_id="toy-app", name="Toy", description="toy", base_task_info=info,
                         describe_taskset=lambda: {"id": "toy"},
                         provide_task_instances=lambda seeds: [info for _ in seeds],
                         rollout=lambda request, _: None, require_api_key=require_api_key)


def test_task_app_docs_and_schema_need_its_key(monkeypatch: pytest.MonkeyPatch):
    from synth_ai.taskapp import create_task_app
    from synth_ai.taskapp.serving import running_in_background

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    with running_in_background(create_task_app(_toy_config()), host="0.0.0.0") as url:
        base = url.replace("0.0.0.0", "127.0.0.1")
        for path in ("/docs", "/openapi.json"):
            assert httpx.get(base + path, timeout=10).status_code == 400  # the task app's "key missing" answer
            assert httpx.get(base + path, headers={"X-API-Key": ENV_KEY}, timeout=10).status_code == 200
        assert "/rollout" in httpx.get(f"{base}/openapi.json", headers={"X-API-Key": ENV_KEY}).json()["paths"]


def test_task_app_without_key_checks_runs_on_loopback_only(monkeypatch: pytest.MonkeyPatch):
    from synth_ai.taskapp.config import TaskAppEntry
    from synth_ai.taskapp.serving import serve_task_app

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    entry = TaskAppEntry(app_id="toy-app", description="toy", config_factory=lambda: _toy_config(require_api_key=False))
    with pytest.raises(AuthError) as caught:
        serve_task_app(entry, host="0.0.0.0", port=free_port(), share_key=False, interactive=False,
                       echo=lambda _m: None)
    assert "Refusing to start task app 'toy-app' on 0.0.0.0" in caught.value.message
    assert "require_api_key" in caught.value.hint


def test_task_app_serve_without_a_key_refuses_to_start(monkeypatch: pytest.MonkeyPatch):
    result = run_cli("task-app", "serve", "math", "--host", "0.0.0.0", "--port", str(free_port()))
    assert result.exit_code == 4, result.stdout + result.stderr
    assert "ENVIRONMENT_API_KEY is not set" in result.stderr


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.1.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.20", False), ("example.org", False), ("", False),
])
def test_which_addresses_count_as_loopback(host, loopback):
    assert is_loopback(host) is loopback
