"""Fuzzing the HTTP APIs with schemathesis: the embedded backend and the three bundled task apps, real servers.

For every operation in each server's own `/openapi.json`, schemathesis generates requests that fit the schema
(positive) and, where the schema constrains parameters, requests that break it (negative), sent over real HTTP
with a valid key. Our request bodies are free-form JSON objects the routes check themselves, which leaves
schemathesis nothing to negate, so every route with a body also gets malformed ones (broken JSON, wrong JSON
types, nesting 20,000 deep, wrong content types, ids and URLs that try to escape). Every route with a path
parameter gets ids that try to escape (`../../`, encoded dots, absolute paths, NUL, very long), and an upload
names its file `../../...`.

Properties, for every response: no 5xx (500 especially), no Python traceback in the body; after the run, no file
was created outside the server's data directory (the backend's SYNTH_AI_HOME, the task app's trace folder).

CI runs a fixed derandomized budget per operation; `pytest -m soak` runs a larger random one.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from backend_support import BackendProcess, serve_backend

CANARY = f"escape-{uuid.uuid4().hex[:12]}"  # every hostile id carries it, so a file it created can be found
HOSTILE_IDS = [f"../../{CANARY}", f"..%2F..%2F{CANARY}", f"%2e%2e%2f%2e%2e%2f{CANARY}", f"/tmp/{CANARY}",
               f"..\\..\\{CANARY}", f"{CANARY}%00.jsonl", "..", ".", "%00", "a" * 4096, "\u202e\U0001f600",
               f"file-{CANARY}' OR '1'='1"]
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\.py\", line \d+")
QUICK = dict(max_examples=6, derandomize=True)  # per operation and mode
SOAK = dict(max_examples=150, derandomize=False)


def _files_under(root: Path, skip: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and skip not in p.parents and ".hypothesis" not in p.parts}


def _escaped(server_root: Path) -> list[Path]:
    """Files carrying the canary near the server: anywhere under its folder and the test session's temp folder,
    and at the top of /tmp and of the checkout (where `../..` from a data dir or an absolute `/tmp/...` lands)."""
    pattern = f"*{CANARY}*"
    found = list(server_root.glob(f"**/{pattern}")) + list(server_root.parent.glob(f"**/{pattern}"))
    for top in (Path("/tmp"), Path(__file__).resolve().parents[2]):
        found += list(top.glob(pattern))
    return found


def check_response(case: Any, response: Any) -> None:
    text = response.text
    assert response.status_code < 500, (response.status_code, case.method, case.formatted_path, text[:500])
    assert not TRACEBACK.search(text), (case.method, case.formatted_path, text[:2000])


def fuzz_schema(schema: Any, headers: dict[str, str], budget: dict[str, Any]) -> int:
    """Every operation, positive and negative cases; returns how many requests were sent."""
    sent = 0
    session = requests.Session()
    for result in schema.get_all_operations():
        operation = result.ok()
        # Negative cases only where the schema constrains something schemathesis can break (query parameters):
        # our bodies are free-form JSON objects that the routes check themselves, so schemathesis has nothing to
        # negate there and spends seconds per route finding that out; `malformed_bodies` covers them instead.
        modes = [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if list(operation.query) else [])
        for mode in modes:

            @settings(deadline=None, database=None, suppress_health_check=list(HealthCheck), **budget)
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                nonlocal sent
                response = case.call(session=session, headers=headers, timeout=30)
                sent += 1
                check_response(case, response)

            try:
                run()
            except Unsatisfiable:  # nothing to break: a route with no parameters and no body has no invalid form
                assert mode is GenerationMode.NEGATIVE, operation.label
    return sent


def hostile_paths(schema: Any, base_url: str, headers: dict[str, str]) -> int:
    """Every route with a path parameter, called with each hostile id in it."""
    sent = 0
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
        for result in schema.get_all_operations():
            operation = result.ok()
            names = re.findall(r"{(\w+)}", operation.path)
            if not names:
                continue
            for hostile in HOSTILE_IDS:
                path = operation.path
                for name in names:
                    # percent-encoded, so the client sends the id as one segment (a raw "../" would be
                                    # resolved away before it left); ids already encoded go as they are
                    path = path.replace("{" + name + "}", hostile if "%" in hostile else quote(hostile, safe=""))
                response = client.request(operation.method.upper(), path, json={} if operation.method.lower()
                                          in ("post", "put", "patch") else None)
                sent += 1
                assert response.status_code < 500, (operation.method, path, response.status_code, response.text)
                assert not TRACEBACK.search(response.text), (operation.method, path, response.text[:2000])
    return sent


MALFORMED = [
    (b"{", "application/json"), (b"null", "application/json"), (b"[]", "application/json"),
    (b'"text"', "application/json"), (b"1e999", "application/json"), (b"NaN", "application/json"),
    (b'{"a": ' + b"[" * 20000 + b"]" * 20000 + b"}", "application/json"), (b"\xff\xfe\x00", "application/json"),
    (b'{"model": 1, "training_file_id": [], "hyperparameters": "x", "seed": {}, "env": null}', "application/json"),
    (b'{"file_id": "../../CANARY", "job_id": "../../CANARY", "task_app_url": "file:///etc/passwd"}',
     "application/json"),
    (b"not json at all", "text/plain"), (b"--x\r\nbroken multipart", "multipart/form-data; boundary=x"),
    (b"", "application/json"),
]


def malformed_bodies(schema: Any, base_url: str, headers: dict[str, str]) -> int:
    """Every route that takes a body, sent bodies that are not what it expects (broken, wrong type, too deep)."""
    sent = 0
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
        for result in schema.get_all_operations():
            operation = result.ok()
            if operation.method.lower() not in ("post", "put", "patch"):
                continue
            path = re.sub(r"{\w+}", "job-does-not-exist", operation.path)
            for body, content_type in MALFORMED:
                body = body.replace(b"CANARY", CANARY.encode())
                response = client.request(operation.method.upper(), path, content=body,
                                          headers={"Content-Type": content_type})
                sent += 1
                assert response.status_code < 500, (operation.method, path, body[:80], response.status_code,
                                                    response.text[:500])
                assert not TRACEBACK.search(response.text), (operation.method, path, response.text[:2000])
    return sent


# --- the embedded backend --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BackendProcess, Path]]:
    root = tmp_path_factory.mktemp("api-fuzz-backend")
    (root / "cwd").mkdir()  # the server's working directory: nothing may land here, nor in its HOME
    for proc in serve_backend(tmp_path_factory, "api-fuzz-backend", warm=False, env={"HOME": str(root / "user")},
                              cwd=root / "cwd", folder=root):
        yield proc, root


def _backend_run(backend: tuple[BackendProcess, Path], budget: dict[str, Any]) -> None:
    proc, root = backend
    headers = {"Authorization": f"Bearer {proc.key}"}
    before = _files_under(root, proc.data_dir)
    schema = schemathesis.openapi.from_url(f"{proc.url}/openapi.json", headers=headers)
    sent = fuzz_schema(schema, headers, budget)
    sent += hostile_paths(schema, proc.url, headers)
    sent += malformed_bodies(schema, proc.url, headers)
    with httpx.Client(base_url=f"{proc.url}/api", headers=headers, timeout=30) as client:
        for route in ("/files", "/learning/files"):  # a file name that tries to climb out of the blob store
            response = client.post(route, data={"purpose": "fine-tune"},
                                   files={"file": (f"../../../{CANARY}.jsonl", b'{"messages": []}\n')})
            sent += 1
            assert response.status_code < 500, response.text
    assert httpx.get(f"{proc.url}/health", timeout=10).status_code == 200  # still serving
    new = _files_under(root, proc.data_dir) - before
    assert not [p for p in new if p.name != proc.log_path.name], new
    assert not _escaped(root)
    print(f"backend: {sent} requests")


def test_backend_api_fuzz(backend) -> None:
    _backend_run(backend, QUICK)


@pytest.mark.soak
def test_backend_api_fuzz_soak(backend) -> None:
    _backend_run(backend, SOAK)


# --- the bundled task apps -------------------------------------------------------------------------------------

TASK_APPS = ["math-single-step", "color-quiz", "grpo-crafter-task-app"]
ENV_KEY = "sk_env_fuzz_0123456789abcdef"


@contextlib.contextmanager
def _task_app(app_id: str, root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from synth_ai.taskapp.discovery import load_task_app
    from synth_ai.taskapp.server import create_task_app
    from synth_ai.taskapp.serving import running_in_background
    from synth_ai.taskapp.tracing import TracingSettings

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    entry = load_task_app(app_id)
    tracing = TracingSettings(True, root / "traces" / "synth_ai.db", root / "traces" / "sft")
    with running_in_background(create_task_app(entry.config_factory(), tracing=tracing)) as url:
        yield url


def _task_app_run(app_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: dict[str, Any]) -> None:
    root = tmp_path / "app"
    (root / "traces").mkdir(parents=True)
    headers = {"X-API-Key": ENV_KEY}
    before = _files_under(tmp_path, root / "traces")
    with _task_app(app_id, root, monkeypatch) as url:
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json", headers=headers)
        sent = fuzz_schema(schema, headers, budget)
        sent += hostile_paths(schema, url, headers)
        sent += malformed_bodies(schema, url, headers)
        assert httpx.get(f"{url}/health", headers=headers, timeout=10).status_code == 200
    new = _files_under(tmp_path, root / "traces") - before
    assert not new, new
    assert not _escaped(tmp_path)
    print(f"{app_id}: {sent} requests")


@pytest.mark.parametrize("app_id", TASK_APPS)
def test_task_app_api_fuzz(app_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _task_app_run(app_id, tmp_path, monkeypatch, QUICK)


@pytest.mark.soak
@pytest.mark.parametrize("app_id", TASK_APPS)
def test_task_app_api_fuzz_soak(app_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _task_app_run(app_id, tmp_path, monkeypatch, SOAK)

