"""The dashboard's login over plain HTTP against a real `synth-ai backend serve`: no cookie means a login page,
a one-time link (from `synth-ai backend open`) works once and expires, the cookie alone does not authenticate API
calls without the dashboard header, and every page carries the CSP."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from backend_support import BackendProcess, serve_backend, wait_for
from dashboard_support import write_eval_traces


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("dash-auth")
    traces = root / "traces"
    traces.mkdir()
    write_eval_traces(traces / "good.db", run_id="eval_http")
    (traces / "junk.db").write_text("not sqlite")
    env = {"SYNTH_AI_BACKEND_TRACES": os.pathsep.join([str(traces), str(root / "missing.db")])}
    yield from serve_backend(tmp_path_factory, "dash-auth", warm=False, env=env, folder=root)


def _token(server: BackendProcess, **body) -> dict:
    with server.client() as api:
        response = api.post("/dashboard/login-token", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def test_no_cookie_means_login_required(server):
    page = httpx.get(f"{server.url}/")
    assert page.status_code == 401
    assert "synth-ai backend open" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "'unsafe-inline'" not in page.headers["content-security-policy"]
    assert httpx.get(f"{server.url}/api/learning/jobs").status_code == 401
    assert httpx.post(f"{server.url}/api/dashboard/login-token").status_code == 401  # tokens need the API key


def test_one_time_link_logs_in_once(server):
    doc = _token(server)
    assert server.key not in doc["url"] and doc["token"] != server.key
    with httpx.Client() as browser:
        first = browser.get(doc["url"])
        assert first.status_code == 303 and first.headers["location"] == "/"
        cookie = first.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert browser.get(f"{server.url}/").status_code == 200
        assert 'src="/dashboard/static/app.js"' in browser.get(f"{server.url}/").text
        # the cookie authenticates API calls only with the header a cross-site request cannot send
        assert browser.get(f"{server.url}/api/learning/jobs").status_code == 401
        listed = browser.get(f"{server.url}/api/learning/jobs", headers={"X-Synth-Dashboard": "1"})
        assert listed.status_code == 200 and listed.json()["object"] == "list"
        # a cookie session cannot mint more login links
        minted = browser.post(f"{server.url}/api/dashboard/login-token", headers={"X-Synth-Dashboard": "1"})
        assert minted.status_code == 403
    again = httpx.get(doc["url"])
    assert again.status_code == 401 and "already used" in again.text
    assert "set-cookie" not in again.headers


def test_link_expires_and_bad_tokens_are_refused(server):
    doc = _token(server, ttl_s=1)
    # the server set its expiry from CLOCK_MONOTONIC (one clock for every process here) before it answered: once
    # that clock has moved a second past the answer, the link has expired
    expired_by = time.monotonic() + 1.0
    wait_for(lambda: time.monotonic() > expired_by, timeout=10, interval=0.05, what="the link's expiry")
    assert httpx.get(doc["url"]).status_code == 401
    assert httpx.get(f"{server.url}/login?token=login_guess").status_code == 401
    assert httpx.get(f"{server.url}/login").status_code == 401
    with server.client() as api:
        assert api.post("/dashboard/login-token", json={"ttl_s": 100000}).status_code == 400
    forged = httpx.get(f"{server.url}/", cookies={"synth_dashboard": "sk_local_forged"})
    assert forged.status_code == 401
    assert httpx.get(f"{server.url}/api/learning/jobs", cookies={"synth_dashboard": "sk_local_forged"},
                     headers={"X-Synth-Dashboard": "1"}).status_code == 401


def test_static_files_are_served_and_confined(server):
    script = httpx.get(f"{server.url}/dashboard/static/app.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert httpx.get(f"{server.url}/dashboard/static/..%2Fapp.py").status_code == 404
    assert httpx.get(f"{server.url}/dashboard/static/missing.js").status_code == 404


def test_backend_open_prints_a_working_link(server, cli, monkeypatch):
    monkeypatch.setenv("SYNTH_AI_HOME", str(server.data_dir))
    monkeypatch.delenv("DISPLAY", raising=False)
    result = cli("backend", "open", "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["opened"] is False and doc["url"].startswith(f"{server.url}/login?token=")
    assert server.key not in result.stdout
    assert httpx.get(doc["url"]).status_code == 303


def test_backend_open_without_a_backend_says_how_to_start_one(cli, tmp_path: Path):
    result = cli("backend", "open")
    assert result.exit_code == 10
    assert "synth-ai backend start" in result.stderr


def test_eval_runs_from_configured_trace_databases(server):
    with server.client() as api:
        doc = api.get("/dashboard/evals").json()
        assert [(r["run_id"], r["sessions"], r["mean_score"]) for r in doc["runs"]] == [("eval_http", 3, 0.5)]
        by_path = {Path(s["path"]).name: s for s in doc["sources"]}
        assert by_path["missing.db"]["exists"] is False
        assert "not a readable SQLite trace database" in by_path["junk.db"]["error"]
        run = doc["runs"][0]
        seeds = api.get(f"/dashboard/evals/{run['db']}/runs/{run['run_id']}").json()["seeds"]
        assert [(s["seed"], s["score"]) for s in seeds] == [(0, 1.0), (1, 0.0), (2, 0.5)]
        session = api.get(f"/dashboard/evals/{run['db']}/sessions/{seeds[0]['session_id']}").json()
        user, assistant = session["messages"]
        assert [p["kind"] for p in user["parts"]] == ["image", "text"]
        assert user["parts"][0]["url"].startswith("data:image/png;base64,")
        assert assistant["parts"] == [{"kind": "text", "text": "The square is red."}]
        assert api.get(f"/dashboard/evals/{run['db']}/runs/eval_nope").status_code == 404
        assert api.get("/dashboard/evals/000000000000/sessions/x").status_code == 404
