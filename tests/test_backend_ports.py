"""The embedded backend and another program on its port (issue 29, item 1).

Port 8000 is the default of many development servers. A backend started without a port (by `backend start`, or
by a command that needs one) takes it when it is free and a free port otherwise; the data dir records where it
went and every later command finds it there; the other program is never touched. A port the user asked for is
taken as given, or refused with a clear error.

The default port is pointed at a real server on a free port (`SYNTH_AI_BACKEND_DEFAULT_PORT`), so these tests do
not depend on what holds port 8000 on the machine that runs them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from conftest import REPO_ROOT, free_port, run_cli
from foreign_support import foreign_server

SFT_CONFIG = "examples/configs/sft_tiny_local.toml"


@pytest.fixture
def taken_default_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Another program (Python's http.server) on the backend's default port."""
    with foreign_server(tmp_path / "site") as foreign:
        monkeypatch.setenv("SYNTH_AI_BACKEND_DEFAULT_PORT", str(foreign.port))
        yield foreign


@pytest.fixture
def stop_backend():
    yield
    from synth_ai.backend import daemon
    from synth_ai.env.paths import data_dir

    daemon.stop(data_dir(create=False))


def _untouched(foreign) -> None:
    """The other program still serves its own page, and no request of ours ever reached it."""
    assert foreign.requests == []
    assert "someone else's page" in httpx.get(f"{foreign.url}/index.html", timeout=5).text
    foreign.requests.clear()


def test_backend_start_moves_off_a_taken_port_and_every_command_finds_it(taken_default_port, stop_backend,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from synth_ai.env.paths import data_dir

    foreign = taken_default_port
    started = run_cli("backend", "start")
    assert started.exit_code == 0, started.stdout + started.stderr
    assert f"Port {foreign.port} is taken by another program" in started.stdout

    status = run_cli("backend", "status", "--json")
    assert status.exit_code == 0, status.stderr
    doc = status.json()
    assert doc["healthy"] and doc["port"] != foreign.port
    record = json.loads((data_dir() / "backend" / "backend.json").read_text())
    assert record["url"] == doc["url"] == f"http://127.0.0.1:{doc['port']}"

    # Commands find it through the record: by default, through a .env that names the default address (as one
    # written for the backend on 8000 would), and by its own URL with no key configured (the embedded key is used).
    assert run_cli("--json", "jobs", "list").exit_code == 0
    Path(".env").write_text(f"BACKEND_BASE_URL=http://127.0.0.1:{foreign.port}\n")
    listed = run_cli("--json", "jobs", "list")
    assert listed.exit_code == 0, listed.stderr
    assert run_cli("--json", "jobs", "list", "--backend", doc["url"]).exit_code == 0
    _untouched(foreign)

    stopped = run_cli("backend", "stop", "--json")
    assert stopped.json()["was_running"] is True
    assert run_cli("backend", "status").exit_code == 10
    _untouched(foreign)


@pytest.mark.parametrize("how", ["--port", "SYNTH_AI_BACKEND_PORT"])
def test_a_port_asked_for_that_is_taken_is_refused(how: str, tmp_path: Path, stop_backend,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from synth_ai.env.paths import data_dir

    with foreign_server(tmp_path / "site") as foreign:
        if how == "--port":
            result = run_cli("backend", "start", "--port", str(foreign.port))
        else:
            monkeypatch.setenv("SYNTH_AI_BACKEND_PORT", str(foreign.port))
            result = run_cli("backend", "start")
        assert result.exit_code == 3, result.stdout + result.stderr
        assert (f"Error: Port {foreign.port} on 127.0.0.1 is taken by another program; the backend was not "
                "started.") in result.stderr
        assert not (data_dir() / "backend" / "backend.json").exists()
        _untouched(foreign)


def test_a_port_asked_for_that_is_free_is_used_as_given(taken_default_port, stop_backend) -> None:
    port = free_port()
    result = run_cli("backend", "start", "--port", str(port), "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["url"] == f"http://127.0.0.1:{port}" and "port_taken" not in result.json()


def test_train_starts_its_backend_on_a_free_port_when_the_default_is_taken(taken_default_port, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The auto-start path every command shares; an invalid dataset then stops the run (and that backend)
    before anything is uploaded."""
    from synth_ai.backend import daemon
    from synth_ai.env.paths import data_dir

    foreign = taken_default_port
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "only one turn"}]}\n')
    monkeypatch.chdir(REPO_ROOT)
    try:
        result = run_cli("train", "--config", SFT_CONFIG, "--dataset", str(bad))
        output = " ".join(result.stdout.split())
        assert result.exit_code == 3, result.stdout + result.stderr
        assert f"starting the embedded backend on 127.0.0.1:{foreign.port} if it is free" in output
        assert f"Port {foreign.port} is taken by another program; the embedded backend listens on" in output
        assert "Stopped the embedded backend this command had started." in output
        _untouched(foreign)
    finally:
        daemon.stop(data_dir(create=False))


def test_the_demo_task_app_uses_its_port_when_free_and_another_when_taken(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from synth_ai.demo import services as demo_services
    from synth_ai.demo.plan import APP_ID

    env = {**os.environ, "ENVIRONMENT_API_KEY": "sk_env_ports_test_0123456789"}

    def serve(label: str) -> str:
        running = demo_services.Services(say=lambda _line: None)
        try:
            url = running.serve_task_app(APP_ID, env=env, cwd=tmp_path, log_file=tmp_path / f"{label}.log")
            assert httpx.get(f"{url}/health", headers={"X-API-Key": env["ENVIRONMENT_API_KEY"]}).status_code == 200
            return url
        finally:
            running.stop(keep=False)

    usual = free_port()
    monkeypatch.setattr(demo_services, "TASK_APP_PORT", usual)
    assert serve("free") == f"http://127.0.0.1:{usual}"
    with foreign_server(tmp_path / "site") as foreign:
        monkeypatch.setattr(demo_services, "TASK_APP_PORT", foreign.port)
        assert serve("taken") != foreign.url
        _untouched(foreign)


def test_the_demo_task_app_moves_on_when_its_port_is_taken_between_the_check_and_the_bind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two demos starting at once both find 8001 free; the one whose task app loses the bind starts it again on a
    free port instead of failing (what two concurrent `demo --fast` runs hit)."""
    from synth_ai import ports
    from synth_ai.demo import services as demo_services
    from synth_ai.demo.plan import APP_ID

    env = {**os.environ, "ENVIRONMENT_API_KEY": "sk_env_ports_race_0123456789"}
    with foreign_server(tmp_path / "site") as foreign:
        # the check said "free", then another program took the port
        monkeypatch.setattr(ports, "preferred_or_free_port", lambda host, preferred: foreign.port)
        lines: list[str] = []
        running = demo_services.Services(say=lines.append)
        try:
            url = running.serve_task_app(APP_ID, env=env, cwd=tmp_path, log_file=tmp_path / "race.log")
            assert url != foreign.url
            assert httpx.get(f"{url}/health", headers={"X-API-Key": env["ENVIRONMENT_API_KEY"]}).status_code == 200
        finally:
            running.stop(keep=False)
        assert [line.split("   ")[0] for line in lines] == [f"$ synth-ai serve {APP_ID} --port {foreign.port}",
                                                             f"$ synth-ai serve {APP_ID} --port {url.rsplit(':', 1)[1]}"]
        # until its own app exits, the demo cannot tell that the port is someone else's: it only asked for /health
        assert set(foreign.requests) <= {"GET /health"}
        foreign.requests.clear()
        _untouched(foreign)
