"""`synth-ai serve` as a real process: health, env files, tracing to SQLite, port conflicts and `--force` (which\nstops synth-ai's own processes only, never another program)."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import textwrap

import httpx
import pytest
from conftest import free_port
from taskapp_support import (
    ENV_KEY,
    completion,
    headers,
    rollout_body,
    scripted_model,
    stop,
    subprocess_env,
    synth_ai_command,
    tool_call,
    wait_for_health,
)

DUMMY_LISTENER = textwrap.dedent('''
    import socket, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(sys.argv[1])))
    s.listen()
    print("listening", flush=True)
    time.sleep(600)
''')


def _dummy_listener(port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", DUMMY_LISTENER, str(port)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "listening"
    return process


def test_serve_process_with_env_file_and_tracing(tmp_path):
    port = free_port()
    env_file = tmp_path / "app.env"
    env_file.write_text(f"ENVIRONMENT_API_KEY={ENV_KEY}\n")
    db = tmp_path / "traces" / "rollouts.db"
    env = subprocess_env()
    env.pop("ENVIRONMENT_API_KEY", None)
    process = subprocess.Popen(
        [*synth_ai_command(), "serve", "math-single-step", "--port", str(port), "--env-file", str(env_file),
         "--trace-db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        health = wait_for_health(base, process=process)
        assert health.json()["healthy"] is True
        assert httpx.get(f"{base}/").json()["service"] == "math-single-step"
        assert httpx.get(f"{base}/health", headers=headers("wrong-key-123456")).status_code == 400
        with scripted_model(lambda body: completion(tool_calls=[tool_call("math_submit", {"answer": "0"})])) \
                as (model_url, _):
            response = httpx.post(f"{base}/rollout", json=rollout_body(f"{model_url}?cid=c-1", seed=5),
                                  headers=headers(), timeout=30)
        assert response.status_code == 200, response.text
        trace = response.json()["trace"]
        assert trace["lm_calls"] == 1 and trace["session_id"]
    finally:
        output = stop(process)
    assert f"[task:server] Starting 'math-single-step' on 127.0.0.1:{port}" in output
    assert ENV_KEY not in output
    with sqlite3.connect(db) as conn:
        sessions = conn.execute("SELECT session_id, metadata FROM session_traces").fetchall()
        assert [s[0] for s in sessions] == [trace["session_id"]]
        kinds = sorted(r[0] for r in conn.execute("SELECT event_type FROM events"))
        assert kinds == ["cais", "environment"]
        assert conn.execute("SELECT COUNT(*) FROM outcome_rewards").fetchone()[0] == 1
        assert conn.execute("SELECT message_type FROM messages ORDER BY id").fetchall() == [
            ("system",), ("user",), ("assistant",)]


def test_a_port_held_by_another_program_is_refused_and_never_stopped_even_with_force(cli, monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    port = free_port()
    dummy = _dummy_listener(port)
    try:
        for force in ((), ("--force",)):
            refused = cli("serve", "math-single-step", "--port", str(port), *force)
            assert refused.exit_code == 3, refused.stderr
            assert f"Port {port} appears to be in use (PIDs: {dummy.pid}) by a program that is not synth-ai" \
                in refused.stderr
            assert "Pass --force" not in refused.stderr and "never stops other programs" in refused.stderr
            suggested = int(re.search(r"e\.g\. --port (\d+)", refused.stderr).group(1))
            assert suggested != port
            assert dummy.poll() is None  # the other program keeps running
    finally:
        stop(dummy)


def test_force_stops_a_synth_ai_task_app_left_on_the_port(cli):
    port = free_port()
    env = subprocess_env(ENVIRONMENT_API_KEY=ENV_KEY)
    first = subprocess.Popen([*synth_ai_command(), "serve", "math", "--port", str(port)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=env)
    try:
        wait_for_health(f"http://127.0.0.1:{port}", process=first)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
            refused = cli("serve", "math-single-step", "--port", str(port))
        assert refused.exit_code == 3
        assert f"(PIDs: {first.pid}) by another synth-ai process" in refused.stderr and "--force" in refused.stderr
        second = subprocess.Popen([*synth_ai_command(), "serve", "math", "--port", str(port), "--force"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  text=True, env=env)
        try:
            wait_for_health(f"http://127.0.0.1:{port}", process=second)
            assert first.wait(timeout=10) is not None  # stopped, by pid
        finally:
            output = stop(second)
        assert f"Stopping the synth-ai processes listening on port {port}: {first.pid}" in output
    finally:
        stop(first)


def test_missing_environment_api_key_fails_without_prompting(cli):
    result = cli("serve", "math-single-step", "--port", str(free_port()))
    assert result.exit_code == 4
    assert "ENVIRONMENT_API_KEY is not set" in result.stderr
    assert "synth-ai setup --local" in result.stderr and "--env-file" in result.stderr


def test_missing_env_file_is_not_found(cli, tmp_path):
    result = cli("task-app", "serve", "math", "--port", str(free_port()), "--env-file", str(tmp_path / "nope.env"))
    assert result.exit_code == 8
    assert "Env file not found" in result.stderr
