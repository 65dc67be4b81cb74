"""Another program at the backend's URL is never taken for a Synth backend (issue 29, item 2).

Every client command goes through one transport; when the URL answers with something no Synth backend sends
(an HTML page, JSON of another shape) the command says so in one line, exits 5, and never prints the page.
The servers here are real: Python's own http.server and small JSON servers on free ports.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO_ROOT, run_cli
from foreign_support import answering_server, foreign_server, json_server

COMMANDS = {
    "jobs list": ["jobs", "list"],
    "jobs get": ["jobs", "get", "job_0123"],
    "jobs events": ["jobs", "events", "job_0123"],
    "jobs metrics": ["jobs", "metrics", "job_0123"],
    "jobs follow": ["jobs", "follow", "job_0123", "--poll-interval", "0.1"],
    "jobs cancel": ["jobs", "cancel", "job_0123"],
    "files list": ["files", "list"],
    "files get": ["files", "get", "file_0123"],
}


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key for a backend named by --backend (what a hosted user has)."""
    monkeypatch.setenv("SYNTH_API_KEY", "sk_test_0123456789abcdef")


def _one_line_refusal(result, url: str, reply: str) -> None:
    output = result.stdout + result.stderr
    assert result.exit_code == 5, output
    assert result.stderr.splitlines()[0] == f"Error: {url} answers but is not a Synth backend ({reply}).", output
    assert "<" not in output and "someone else" not in output, "the other server's page is never printed"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_after_setup_local_a_web_server_on_the_backend_port_is_named_as_such(name: str, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    with foreign_server(tmp_path / "site") as foreign:
        monkeypatch.setenv("SYNTH_AI_BACKEND_DEFAULT_PORT", str(foreign.port))  # it holds the backend's port
        assert run_cli("setup", "--local").exit_code == 0
        result = run_cli(*COMMANDS[name])
        _one_line_refusal(result, foreign.url, "text/html 501" if name == "jobs cancel" else "text/html 404")
        assert foreign.requests, "it did answer: the command talked to it, and said what it is"


@pytest.mark.usefixtures("api_key")
def test_the_json_error_names_the_reply_and_not_its_body(tmp_path: Path) -> None:
    with foreign_server(tmp_path / "site") as foreign:
        result = run_cli("--json", "jobs", "list", "--backend", foreign.url)
        assert result.exit_code == 5
        error = result.json()["error"]
        assert error["code"] == "not_a_backend" and error["exit_code"] == 5
        assert error["details"]["reply"] == "text/html 404" and "<" not in result.stdout


@pytest.mark.usefixtures("api_key")
def test_train_against_a_web_server_stops_before_anything_is_sent(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    with foreign_server(tmp_path / "site") as foreign:
        result = run_cli("train", "--config", "examples/configs/sft_tiny_local.toml", "--backend", foreign.url)
        _one_line_refusal(result, foreign.url, "text/html 404")
        assert not any(r.startswith("POST") for r in foreign.requests), "nothing uploaded, no job created"


@pytest.mark.usefixtures("api_key")
@pytest.mark.parametrize(("status", "body", "reply"), [
    (404, {"message": "Cannot GET /api/learning/jobs", "statusCode": 404},
     "application/json 404 without a Synth error body"),
    (200, "ok", "application/json 200 whose body is a bare str"),
])
def test_json_of_another_shape_is_named_as_such(status: int, body, reply: str) -> None:
    with json_server(status, body) as foreign:
        _one_line_refusal(run_cli("jobs", "list", "--backend", foreign.url), foreign.url, reply)


def test_at_the_embedded_address_a_plain_fastapi_404_is_checked_against_health(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Any FastAPI app answers `{"detail": "Not Found"}`, as a Synth backend may for a route it lacks; at the
    embedded backend's address the reply must carry its `error` object, or its /health must say it is ours."""
    with json_server(404, {"detail": "Not Found"}) as foreign:
        monkeypatch.setenv("SYNTH_AI_BACKEND_DEFAULT_PORT", str(foreign.port))
        assert run_cli("setup", "--local").exit_code == 0
        _one_line_refusal(run_cli("jobs", "list"), foreign.url,
                          "application/json 404, and its /health is not the synth-ai backend's")
        assert "GET /health" in foreign.requests and "/health" not in foreign.keyed, "asked, without the key"


@pytest.mark.usefixtures("api_key")
def test_a_proxy_page_of_a_failing_backend_is_described_not_printed() -> None:
    """502/503/504 pages come from the proxy in front of a real backend: retried, then a server error (exit 9)
    that says what came back without printing it."""
    page = b"<html><body><h1>502 Bad Gateway</h1>someone else's page</body></html>"
    with answering_server(502, page, "text/html") as proxy:
        result = run_cli("jobs", "list", "--backend", proxy.url)
        output = result.stdout + result.stderr
        assert result.exit_code == 9, output
        assert "a text/html 502 reply that is not JSON" in output
        assert "<" not in output and "someone else" not in output
        assert len(proxy.requests) == 5, "retried as a failing backend is"
