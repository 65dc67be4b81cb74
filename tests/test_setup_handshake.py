"""`synth-ai setup`: the device-code handshake against a scripted stand-in for the Synth website (an external
service) on 127.0.0.1, and the keys it returns saved to ./.env and config.json."""

from __future__ import annotations

import json
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import free_port, run_cli
from synth_ai.env.dotenv_files import read_env_file
from synth_ai.errors import AuthError, DeadlineError, ExitCode, NetworkError, ServerError
from synth_ai.setup.handshake import DEFAULT_ORIGIN, DEV_ORIGIN, Handshake, resolve_origin

SYNTH_KEY = "sk_live_PLANTEDsynthKEY0123456789"
ENV_KEY = "PLANTEDenvKEY" + "ab" * 20
DEVICE_CODE = "dc_PLANTEDdeviceCODE987"


def token_ok(org: str = "Acme Labs", keys: dict[str, Any] | None = None) -> tuple[int, Any]:
    return 200, {"org": {"name": org}, "keys": keys if keys is not None else {"synth": SYNTH_KEY, "rl_env": ENV_KEY}}


class FakeSite:
    """A scripted Synth website: `init` answers once per request; `tokens` are served in order, the last repeated."""

    def __init__(self, init: tuple[int, Any] | None = None, tokens: list[tuple[int, Any]] | None = None) -> None:
        self.init = init or (200, {"device_code": DEVICE_CODE, "verification_uri": "https://example.test/approve",
                                   "expires_in": 600, "interval": 1})
        self.tokens = list(tokens or [token_ok()])
        self.requests: list[tuple[str, Any]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                site.requests.append((self.path, body))
                if self.path == "/api/sdk/handshake/init":
                    status, payload = site.init
                elif self.path == "/api/sdk/handshake/token":
                    status, payload = site.tokens.pop(0) if len(site.tokens) > 1 else site.tokens[0]
                else:
                    status, payload = 404, {"detail": "not found"}
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def token_polls(self) -> int:
        return sum(1 for path, _ in self.requests if path.endswith("/token"))


@pytest.fixture(autouse=True)
def _no_origin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SYNTH_SETUP_ORIGIN", raising=False)


@pytest.fixture
def site(request: pytest.FixtureRequest) -> Iterator[FakeSite]:
    with FakeSite(**getattr(request, "param", {})) as running:
        yield running


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def config_file(isolated_home: Path) -> Path:
    return isolated_home.parent / "home" / ".synth-ai" / "config.json"


def assert_no_secrets(*texts: str) -> None:
    for text in texts:
        for secret in (SYNTH_KEY, ENV_KEY, DEVICE_CODE):
            assert secret not in text


# CLI, end to end ------------------------------------------------------------------------------------------------

def test_success_writes_both_files_0600(site: FakeSite, isolated_home: Path) -> None:
    result = run_cli("setup", "--origin", site.url, "--no-browser")
    assert result.exit_code == 0, result.stderr
    env = isolated_home / ".env"
    assert read_env_file(env) == {"SYNTH_API_KEY": SYNTH_KEY, "ENVIRONMENT_API_KEY": ENV_KEY}
    assert mode(env) == 0o600
    cfg = config_file(isolated_home)
    assert cfg.read_text() == json.dumps({"ENVIRONMENT_API_KEY": ENV_KEY, "SYNTH_API_KEY": SYNTH_KEY},
                                         indent=2, sort_keys=True) + "\n"
    assert mode(cfg) == 0o600
    assert site.requests[0] == ("/api/sdk/handshake/init", None)
    assert site.requests[1] == ("/api/sdk/handshake/token", {"device_code": DEVICE_CODE})
    assert "https://example.test/approve" in result.stdout
    assert "Connected to Acme Labs" in result.stdout
    assert "Wrote SYNTH_API_KEY=sk_l…89 to ./.env" in result.stdout
    assert_no_secrets(result.stdout, result.stderr)


def test_json_output_is_one_masked_document(site: FakeSite, isolated_home: Path) -> None:
    result = run_cli("setup", "--origin", site.url, "--no-browser", "--json", "--env-file", "custom.env")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["mode"] == "hosted" and doc["organization"] == "Acme Labs"
    assert doc["origin"] == {"url": site.url, "source": "--origin"}
    assert {k["name"]: k["value"] for k in doc["keys"]} == {"SYNTH_API_KEY": "sk_l…89",
                                                            "ENVIRONMENT_API_KEY": "PLAN…ab"}
    assert [f["path"] for f in doc["files"]] == [str(isolated_home / "custom.env"), str(config_file(isolated_home))]
    assert all(f["mode"] == "0600" and f["created"] for f in doc["files"])
    assert "https://example.test/approve" in result.stderr  # the URL still reaches the user
    assert not (isolated_home / ".env").exists()
    assert_no_secrets(result.stdout, result.stderr)


def test_rerun_with_same_keys_reports_unchanged(site: FakeSite, isolated_home: Path) -> None:
    assert run_cli("setup", "--origin", site.url, "--no-browser").exit_code == 0
    env = isolated_home / ".env"
    before = env.stat().st_mtime_ns
    result = run_cli("setup", "--origin", site.url, "--no-browser")
    assert result.exit_code == 0
    assert "SYNTH_API_KEY=sk_l…89 already in ./.env (unchanged)" in result.stdout
    assert env.stat().st_mtime_ns == before


def test_existing_env_file_keeps_its_other_lines(site: FakeSite, isolated_home: Path) -> None:
    env = isolated_home / ".env"
    env.write_text("# my project\nexport SYNTH_API_KEY=sk_old_key_value\nOTHER=1\n")
    env.chmod(0o644)
    result = run_cli("setup", "--origin", site.url, "--no-browser")
    assert result.exit_code == 0, result.stderr
    assert env.read_text() == (f"# my project\nexport SYNTH_API_KEY={SYNTH_KEY}\nOTHER=1\n"
                               f"ENVIRONMENT_API_KEY={ENV_KEY}\n")
    assert mode(env) == 0o600
    assert "(replaced sk_o…ue)" in result.stdout and "Tightened ./.env from mode 0644 to 0600" in result.stdout


@pytest.mark.parametrize("site", [{"tokens": [(428, {"error": "authorization_pending"}), token_ok()]}],
                         indirect=True)
def test_pending_then_success(site: FakeSite, isolated_home: Path) -> None:
    result = run_cli("setup", "--origin", site.url, "--no-browser")
    assert result.exit_code == 0, result.stderr
    assert site.token_polls() == 2
    assert read_env_file(isolated_home / ".env")["SYNTH_API_KEY"] == SYNTH_KEY


@pytest.mark.parametrize("site", [{"tokens": [(410, {"error": "expired_token"})]},
                                  {"tokens": [(404, {"detail": "unknown device code"})]}], indirect=True)
def test_expired_or_revoked_code_is_an_auth_error(site: FakeSite, isolated_home: Path) -> None:
    result = run_cli("setup", "--origin", site.url, "--no-browser")
    assert result.exit_code == ExitCode.AUTH
    assert "device code expired or was revoked" in result.stderr
    assert "Hint:" in result.stderr and "Traceback" not in result.stderr
    assert not (isolated_home / ".env").exists()
    assert not config_file(isolated_home).exists()


@pytest.mark.parametrize("site", [{"tokens": [(428, {"error": "authorization_pending"})]}], indirect=True)
def test_timeout_is_a_timeout_error(site: FakeSite, isolated_home: Path) -> None:
    result = run_cli("setup", "--origin", site.url, "--no-browser", "--timeout", "1", "--json")
    assert result.exit_code == ExitCode.TIMEOUT
    error = result.json()["error"]
    assert error["code"] == "timeout" and "timed out" in error["message"]
    assert site.token_polls() == 2
    assert not (isolated_home / ".env").exists()


def test_unreachable_origin_is_a_network_error(isolated_home: Path) -> None:
    result = run_cli("setup", "--origin", f"http://127.0.0.1:{free_port()}", "--no-browser")
    assert result.exit_code == ExitCode.NETWORK
    assert "Cannot reach http://127.0.0.1:" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("site, message", [
    ({"init": (200, "<html>not json</html>")}, "not a JSON object"),
    ({"init": (200, {"device_code": DEVICE_CODE})}, "missing verification_uri"),
    ({"init": (500, "boom")}, "Handshake init failed (500): boom"),
    ({"tokens": [(200, {"org": {"name": "x"}})]}, "no `keys` object"),
    ({"tokens": [(200, {"keys": {"rl_env": ENV_KEY}})]}, "no `keys.synth`"),
    ({"tokens": [(200, {"keys": {"synth": SYNTH_KEY + " with spaces"}})]}, "`keys.synth` is not a key"),
], indirect=["site"])
def test_malformed_replies_are_server_errors(site: FakeSite, message: str, isolated_home: Path) -> None:
    result = run_cli("setup", "--origin", site.url, "--no-browser")
    assert result.exit_code == ExitCode.SERVER, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert_no_secrets(result.stdout, result.stderr)
    assert not (isolated_home / ".env").exists()


def test_broken_config_json_stops_before_the_handshake(site: FakeSite, isolated_home: Path) -> None:
    cfg = config_file(isolated_home)
    cfg.parent.mkdir(parents=True)
    cfg.write_text("{not json")
    result = run_cli("setup", "--origin", site.url, "--no-browser")
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "not valid JSON" in result.stderr
    assert site.requests == [] and cfg.read_text() == "{not json"


def test_dev_and_origin_together_is_a_usage_error() -> None:
    result = run_cli("setup", "--dev", "--origin", "http://x.test")
    assert result.exit_code == ExitCode.USAGE


# Handshake unit tests (same server, injected sleep and clock) -----------------------------------------------------

class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("site", [{
    "init": (200, {"device_code": DEVICE_CODE, "verification_uri": "https://example.test/a", "interval": 2}),
    "tokens": [(428, {"error": "authorization_pending"}), (400, {"error": "slow_down"}), (503, "busy"), token_ok()],
}], indirect=True)
def test_polling_honours_interval_and_slow_down(site: FakeSite) -> None:
    clock = FakeClock()
    with Handshake(site.url, sleep=clock.sleep, clock=clock) as handshake:
        code = handshake.start()
        assert (code.expires_in, code.interval) == (600.0, 2.0)
        assert DEVICE_CODE not in repr(code)
        creds = handshake.wait(code)
    assert creds.values() == {"SYNTH_API_KEY": SYNTH_KEY, "ENVIRONMENT_API_KEY": ENV_KEY}
    assert SYNTH_KEY not in repr(creds)
    assert clock.sleeps == [2.0, 7.0, 7.0]


@pytest.mark.parametrize("site", [{"tokens": [(428, {"error": "authorization_pending"})]}], indirect=True)
def test_deadline_is_the_code_expiry_on_a_monotonic_clock(site: FakeSite) -> None:
    site.init = (200, {"device_code": DEVICE_CODE, "verification_uri": "https://example.test/a",
                       "expires_in": 30, "interval": 4})
    clock = FakeClock()
    with Handshake(site.url, sleep=clock.sleep, clock=clock) as handshake:
        code = handshake.start()
        with pytest.raises(DeadlineError) as err:
            handshake.wait(code)
    assert clock.now == 30.0
    assert sum(clock.sleeps) == 30.0 and clock.sleeps[-1] == 2.0
    assert err.value.details["last_answer"] == "HTTP 428 authorization_pending"
    assert site.token_polls() == 9


@pytest.mark.parametrize("site", [{"tokens": [(403, {"error": "access_denied"})]}], indirect=True)
def test_access_denied_stops_polling(site: FakeSite) -> None:
    clock = FakeClock()
    with Handshake(site.url, sleep=clock.sleep, clock=clock) as handshake, pytest.raises(AuthError, match="denied"):
        handshake.wait(handshake.start())
    assert site.token_polls() == 1


def test_lost_origin_during_polling_is_a_network_error(site: FakeSite) -> None:
    clock = FakeClock()
    with Handshake(site.url, sleep=clock.sleep, clock=clock) as handshake:
        code = handshake.start()
        site.server.shutdown()
        site.server.server_close()
        with pytest.raises(NetworkError, match="Lost contact"):
            handshake.wait(code)
    assert len(clock.sleeps) == 2


def test_malformed_numbers_fall_back_to_defaults(site: FakeSite) -> None:
    site.init = (200, {"device_code": DEVICE_CODE, "verification_uri": "https://example.test/a",
                       "expires_in": "soon", "interval": 0.2})
    with Handshake(site.url) as handshake:
        code = handshake.start()
        assert (code.expires_in, code.interval) == (600.0, 1.0)  # the interval is at least 1 s
        site.init = (200, {**site.init[1], "expires_in": None, "interval": 0})
        assert (handshake.start().expires_in, handshake.start().interval) == (600.0, 3.0)


def test_verification_uri_must_be_http(site: FakeSite) -> None:
    site.init = (200, {"device_code": DEVICE_CODE, "verification_uri": "file:///etc/passwd"})
    with Handshake(site.url) as handshake, pytest.raises(ServerError, match="verification_uri"):
        handshake.start()


def test_origin_resolution() -> None:
    assert resolve_origin(None, environ={}).url == DEFAULT_ORIGIN
    assert resolve_origin(None, dev=True, environ={"SYNTH_SETUP_ORIGIN": "https://env.test"}).url == DEV_ORIGIN
    assert resolve_origin(None, environ={"SYNTH_SETUP_ORIGIN": "https://env.test/"}).source == "SYNTH_SETUP_ORIGIN"
    assert resolve_origin("https://flag.test/", dev=False, environ={}).url == "https://flag.test"
    with pytest.raises(Exception, match="not an http"):
        resolve_origin("ftp://x", environ={})


def test_every_request_has_a_finite_timeout(site: FakeSite) -> None:
    seen: list[httpx.Timeout] = []

    def hook(request: httpx.Request) -> None:
        seen.append(request.extensions["timeout"])

    from synth_ai.setup import handshake as module

    client = module._client()
    client.event_hooks["request"] = [hook]
    with Handshake(site.url, http=client) as handshake:
        handshake.wait(handshake.start())
    client.close()
    assert seen and all(all(v is not None for v in t.values()) for t in seen)


def test_browser_is_opened_unless_disabled(site: FakeSite, isolated_home: Path) -> None:
    from synth_ai.cli.output import Output
    from synth_ai.setup.flow import SetupOptions, run_setup

    opened: list[str] = []
    summary = run_setup(SetupOptions(origin=site.url), Output(json_mode=True),
                        browser=lambda url: opened.append(url) or True)
    assert opened == ["https://example.test/approve"] and summary["mode"] == "hosted"
    run_setup(SetupOptions(origin=site.url, open_browser=False), Output(json_mode=True),
              browser=lambda url: opened.append(url) or True)
    assert len(opened) == 1
