"""Deadlines: a backend that accepts connections and never answers cannot hold a command past its deadline, every
call has finite timeouts, retries stay inside the deadline, Ctrl-C says how to resume (exit 130), and bad flag
values are usage errors (exit 2)."""

from __future__ import annotations

import os
import re
import signal
import threading

import httpx
import pytest
from backend_support import BackendProcess, chat_jsonl, sft_body, upload
from conftest import run_cli

from reliability.silent_server import SilentServer
from synth_ai.client.transport import RetryPolicy, Transport
from synth_ai.errors import DeadlineError

SFT_CONFIG = "examples/configs/sft_tiny_local.toml"


@pytest.fixture
def repo_cwd(monkeypatch: pytest.MonkeyPatch):
    from conftest import REPO_ROOT

    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setenv("SYNTH_API_KEY", "sk_test_deadlines")


def test_train_against_a_silent_backend_stops_at_its_deadline_naming_what_hung(repo_cwd):
    with SilentServer() as server:
        result = run_cli("train", "--config", SFT_CONFIG, "--backend", server.url, "--poll-timeout", "2")
    assert result.exit_code == 7, result.stdout + result.stderr  # TIMEOUT, as docs/cli.md says
    assert f"GET {server.url}/api/health got no answer" in result.stderr
    assert "deadline (--poll-timeout 2 s) has passed" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [("jobs", "events", "job_x", "--follow"), ("jobs", "follow", "job_x")],
                         ids=["events --follow", "follow"])
def test_following_a_job_on_a_silent_backend_stops_at_its_deadline(repo_cwd, command):
    with SilentServer() as server:
        result = run_cli(*command, "--poll-timeout", "1", "--backend", server.url)
    assert result.exit_code == 7, result.stdout + result.stderr
    # the embedded backend's follow reads the job's event stream, so that is the call that hung
    assert f"GET {server.url}/api/learning/jobs/job_x/events/stream got no answer" in result.stderr
    assert "--poll-timeout 1 s" in result.stderr and "Resume with: synth-ai jobs follow job_x --backend" in result.stderr


@pytest.mark.parametrize(("command", "hung"), [
    (("files", "list"), "GET /api/files"),
    (("files", "get", "file_x"), "GET /api/files/file_x"),
    (("jobs", "list"), "GET /api/learning/jobs"),
    (("jobs", "get", "job_x", "--kind", "rl"), "GET /api/rl/jobs/job_x"),
    (("jobs", "events", "job_x"), "GET /api/learning/jobs/job_x/events"),
    (("jobs", "metrics", "job_x"), "GET /api/learning/jobs/job_x/metrics"),
    (("jobs", "cancel", "job_x"), "POST /api/learning/jobs/job_x/cancel"),
    (("models", "list"), "GET /api/learning/models"),
], ids=lambda c: " ".join(c) if isinstance(c, tuple) else c.split()[0])
def test_timeout_bounds_files_jobs_and_models_commands_on_a_silent_backend(repo_cwd, command, hung):
    with SilentServer() as server:
        result = run_cli(*command, "--timeout", "1", "--backend", server.url)
    assert result.exit_code == 7, result.stdout + result.stderr
    method, path = hung.split()
    assert f"{method} {server.url}{path}" in result.stderr, result.stderr
    assert "deadline (--timeout 1 s) has passed" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_silent_server_gets_one_retry_not_four_without_a_deadline(method):
    """Finite timeouts on every call: a read timeout ends the call after one more try (GET, or a keyed POST)."""
    with SilentServer() as server:
        transport = Transport(server.url, "k", timeout=httpx.Timeout(0.3), sleep=lambda _s: None)
        with transport, pytest.raises(DeadlineError) as caught:
            transport.request(method, "/learning/jobs", json={}, idempotency_key="same-key")
        assert len(server.connections) == 2
    assert f"{method} {server.url}/learning/jobs timed out" in caught.value.message


def test_retries_and_backoff_stop_at_the_deadline():
    """A server that keeps answering 503 with a long Retry-After: the transport never sleeps past the deadline, it
    stops with the deadline error (fake clock; the fault is injected at the transport level)."""
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    def always_busy(request: httpx.Request) -> httpx.Response:
        now[0] += 0.5  # each answer takes half a second
        return httpx.Response(503, headers={"Retry-After": "3"}, json={"detail": "busy"})

    transport = Transport("http://backend.test/api", "k", retry=RetryPolicy(max_retries=10), sleep=sleep,
                          http_transport=httpx.MockTransport(always_busy), clock=lambda: now[0])
    transport.set_deadline(10.0, "--poll-timeout 10 s")
    with transport, pytest.raises(DeadlineError) as caught:
        transport.get_json("/learning/jobs")
    assert slept == [3.0, 3.0]  # 0.5 + 3 + 0.5 + 3 + 0.5 = 7.5: a third wait of 3 s would end past 10
    assert now[0] <= 10.0
    assert "answered 503" in caught.value.message and "--poll-timeout 10 s" in caught.value.message


def test_a_call_after_the_deadline_is_not_sent():
    sent: list[httpx.Request] = []
    transport = Transport("http://backend.test/api", "k", clock=lambda: 100.0,
                          http_transport=httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200)))
    transport.deadline, transport.deadline_label = 99.0, "--poll-timeout 5 s"
    with transport, pytest.raises(DeadlineError, match="was not sent"):
        transport.get_json("/files")
    assert sent == []


def _interrupt_soon(delay: float = 1.0) -> threading.Timer:
    """Ctrl-C, as the terminal sends it: SIGINT to this process (Python raises KeyboardInterrupt in the main
    thread, wherever the command is)."""
    timer = threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_ctrl_c_while_following_says_how_to_resume(tmp_path, monkeypatch: pytest.MonkeyPatch):
    backend = BackendProcess(tmp_path / "data").start()
    try:
        with backend.client() as api:
            file_id = upload(api, chat_jsonl(tmp_path / "c.jsonl")).json()["id"]
            job_id = api.post("/learning/jobs", json=sft_body(file_id)).json()["id"]  # created, never started
        monkeypatch.setenv("SYNTH_API_KEY", backend.key)
        timer = _interrupt_soon()
        result = run_cli("jobs", "events", job_id, "--follow", "--poll-interval", "0.2", "--backend", backend.url)
        timer.join()
    finally:
        backend.stop()
    assert result.exit_code == 130, result.stdout + result.stderr
    assert f"Detached from job {job_id}" in result.stderr
    assert f"Resume with: synth-ai jobs follow {job_id} --backend {backend.url}/api" in result.stderr


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_ctrl_c_before_the_job_exists_says_to_run_the_same_command(repo_cwd):
    with SilentServer() as server:
        timer = _interrupt_soon()
        result = run_cli("train", "--config", SFT_CONFIG, "--backend", server.url, "--poll-timeout", "60")
        timer.join()
    assert result.exit_code == 130, result.stdout + result.stderr
    assert "Interrupted before the job was started" in result.stderr
    assert f"synth-ai train --config {SFT_CONFIG} --backend {server.url}" in result.stderr


@pytest.mark.parametrize("args", [
    ["train", "--config", SFT_CONFIG, "--examples", "0"],
    ["train", "--config", SFT_CONFIG, "--poll-timeout", "0"],
    ["train", "--config", SFT_CONFIG, "--poll-interval", "-1"],
    ["jobs", "events", "job_x", "--follow", "--poll-timeout", "0"],
    ["jobs", "list", "--limit", "0"],
    ["jobs", "get", "job_x", "--timeout", "0"],
    ["files", "list", "--limit", "5000"],
    ["models", "list", "--mode", "dpo"],
    ["eval", "math", "--concurrency", "0"],
    ["eval", "math", "--rollout-timeout", "0"],
    ["task-app", "validate", "math", "--model", "m"],
    ["task-app", "validate", "math", "--url", "http://127.0.0.1:9"],
    ["deploy", "--runtime", "uvicorn", "math", "--port", "0"],
], ids=lambda a: " ".join(a[:2] + [a[-2], a[-1]]))
def test_bad_flag_values_are_usage_errors(repo_cwd, args):
    result = run_cli(*args)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_rl_train_with_a_silent_task_app_stops_at_its_deadline(repo_cwd, tmp_path, monkeypatch):
    backend = BackendProcess(tmp_path / "data").start()
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "sk_env_deadlines_0123456789")
    try:
        with SilentServer() as app:
            result = run_cli("train", "--config", "examples/configs/rl_text_qwen3_4b.toml", "--backend", backend.url,
                             "--task-url", app.url, "--poll-timeout", "2")
    finally:
        backend.stop()
    assert result.exit_code == 7, result.stdout + result.stderr
    assert f"GET {app.url}/health did not answer" in result.stderr
    waited = re.search(r"did not answer within ([\d.]+)s", result.stderr)
    assert waited and float(waited.group(1)) <= 2  # the check's own 10 s cut to what --poll-timeout left
