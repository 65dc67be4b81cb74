"""The device-code handshake with the Synth website that `synth-ai setup` runs (synth-ai 0.2.17's protocol).

1. `POST <origin>/api/sdk/handshake/init` (no body) answers `device_code` and `verification_uri` (required),
   `expires_in` (seconds, default 600) and `interval` (seconds between polls, default 3, at least 1).
2. The user approves at `verification_uri` in a browser.
3. `POST <origin>/api/sdk/handshake/token` with `{"device_code": ...}` every `interval` seconds: 200 carries the
   keys (`keys.synth` → SYNTH_API_KEY, `keys.rl_env` → ENVIRONMENT_API_KEY, `org.name`); 404 or 410 means the code
   expired or was revoked; any other answer (428 `authorization_pending`, ...) means "not yet", until the deadline.

Where 0.2.17 raised bare RuntimeError/TimeoutError (a traceback), every failure here is a typed SynthError with a
hint: unreachable origin → NetworkError, expired/revoked/denied → AuthError, deadline → DeadlineError, a reply
without the required fields → ServerError. The HTTP client, sleep and monotonic clock are injectable for tests.
Neither the device code nor any key is ever put in a message or a repr.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from synth_ai.errors import AuthError, DeadlineError, InvalidInputError, NetworkError, ServerError
from synth_ai.urls import join_url

DEFAULT_ORIGIN = "https://www.usesynth.ai"
DEV_ORIGIN = "http://localhost:3000"
ORIGIN_ENV = "SYNTH_SETUP_ORIGIN"
INIT_PATH = "/api/sdk/handshake/init"
TOKEN_PATH = "/api/sdk/handshake/token"

DEFAULT_EXPIRES_IN = 600.0
DEFAULT_INTERVAL = 3.0
MIN_INTERVAL = 1.0
MAX_INTERVAL = 60.0
SLOW_DOWN_STEP = 5.0  # RFC 8628: add 5 s to the interval on `slow_down`
MAX_NETWORK_FAILURES = 3  # consecutive failed polls before giving up on the origin
HTTP_TIMEOUT = httpx.Timeout(15.0, connect=5.0)
MAX_KEY_LENGTH = 4096

_RETRY_HINT = "Run `synth-ai setup` again, or `synth-ai setup --local` for keys that need no account."


@dataclass(frozen=True)
class Origin:
    url: str  # scheme://host[:port][/prefix], no trailing slash
    source: str  # "--origin", "--dev", SYNTH_SETUP_ORIGIN or "default"

    @property
    def loopback(self) -> bool:
        host = (urlsplit(self.url).hostname or "").lower()
        return host in {"localhost", "::1"} or host.startswith("127.")


def normalize_origin(raw: str, *, source: str) -> str:
    url = raw.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise InvalidInputError(f"{source}: {raw!r} is not an http(s) origin.",
                                hint=f"Use e.g. {DEFAULT_ORIGIN} or {DEV_ORIGIN}.")
    return url


def resolve_origin(flag: str | None = None, *, dev: bool = False,
                   environ: Mapping[str, str] | None = None) -> Origin:
    """`--origin` > `--dev` (http://localhost:3000) > `$SYNTH_SETUP_ORIGIN` > https://www.usesynth.ai."""
    env = os.environ if environ is None else environ
    if flag and flag.strip():
        return Origin(normalize_origin(flag, source="--origin"), "--origin")
    if dev:
        return Origin(DEV_ORIGIN, "--dev")
    if env.get(ORIGIN_ENV, "").strip():
        return Origin(normalize_origin(env[ORIGIN_ENV], source=ORIGIN_ENV), ORIGIN_ENV)
    return Origin(DEFAULT_ORIGIN, "default")


@dataclass(frozen=True)
class DeviceCode:
    device_code: str = field(repr=False)
    verification_uri: str
    expires_in: float
    interval: float
    user_code: str | None = None


@dataclass(frozen=True)
class Credentials:
    organization: str
    synth_api_key: str | None = field(default=None, repr=False)
    environment_api_key: str | None = field(default=None, repr=False)

    def values(self) -> dict[str, str]:
        found = {"SYNTH_API_KEY": self.synth_api_key, "ENVIRONMENT_API_KEY": self.environment_api_key}
        return {name: value for name, value in found.items() if value}


class Handshake:
    """One device-code exchange with `origin`."""

    def __init__(self, origin: str, *, http: httpx.Client | None = None,
                 sleep: Callable[[float], None] | None = None, clock: Callable[[], float] | None = None) -> None:
        self.origin = origin.rstrip("/")
        self._own_http = http is None
        self.http = http or _client()
        self.sleep = sleep or time.sleep
        self.clock = clock or time.monotonic

    def close(self) -> None:
        if self._own_http:
            self.http.close()

    def __enter__(self) -> Handshake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> DeviceCode:
        """Ask for a device code."""
        url = join_url(self.origin, INIT_PATH)
        try:
            response = self.http.post(url)
        except httpx.TransportError as exc:
            raise NetworkError(f"Cannot reach {self.origin}: {_reason(exc)}.",
                               hint="Check your connection and the origin (--origin URL; --dev for "
                                    f"{DEV_ORIGIN}). {_RETRY_HINT}") from None
        if response.status_code != 200:
            hint = (f"{self.origin} does not look like the Synth website; check --origin."
                    if response.status_code in (404, 405) else _RETRY_HINT)
            raise ServerError(f"Handshake init failed ({response.status_code}): {_snippet(response)}", hint=hint)
        doc = _json_object(response, what="Handshake init", origin=self.origin)
        missing = [k for k in ("device_code", "verification_uri") if not _text(doc.get(k))]
        if missing:
            raise ServerError(f"Handshake init reply from {self.origin} is malformed: missing {', '.join(missing)}.",
                              hint=f"Check that {self.origin} is the Synth website (--origin URL).")
        uri = _text(doc["verification_uri"])
        if urlsplit(uri).scheme not in ("http", "https"):
            raise ServerError(f"Handshake init reply from {self.origin} is malformed: verification_uri is not an "
                              "http(s) URL.", hint=f"Check that {self.origin} is the Synth website (--origin URL).")
        return DeviceCode(
            device_code=_text(doc["device_code"]),
            verification_uri=uri,
            expires_in=_seconds(doc.get("expires_in"), DEFAULT_EXPIRES_IN, low=1.0),
            interval=min(_seconds(doc.get("interval"), DEFAULT_INTERVAL, low=MIN_INTERVAL), MAX_INTERVAL),
            user_code=_text(doc.get("user_code")) or None,
        )

    def wait(self, code: DeviceCode, *, timeout: float | None = None) -> Credentials:
        """Poll until the user approves, the code expires, or `timeout` seconds pass (whichever is first)."""
        limit = code.expires_in if timeout is None else min(timeout, code.expires_in)
        deadline = self.clock() + limit
        interval = code.interval
        failures = 0
        last = "no answer yet"
        url = join_url(self.origin, TOKEN_PATH)
        while True:
            try:
                response = self.http.post(url, json={"device_code": code.device_code})
            except httpx.TransportError as exc:
                failures += 1
                last = f"network error: {_reason(exc)}"
                if failures >= MAX_NETWORK_FAILURES:
                    raise NetworkError(f"Lost contact with {self.origin} while waiting for approval ({_reason(exc)}).",
                                       hint=f"Check your connection. {_RETRY_HINT}") from None
            else:
                failures = 0
                status = response.status_code
                if status == 200:
                    return _credentials(_json_object(response, what="Handshake token", origin=self.origin),
                                        origin=self.origin)
                if status in (404, 410):
                    raise AuthError("Handshake failed: device code expired or was revoked.",
                                    hint=f"Run `synth-ai setup` again and approve within {_minutes(code.expires_in)}.")
                error = _error_code(response)
                if error == "access_denied":
                    raise AuthError("Handshake failed: the request was denied in the browser.", hint=_RETRY_HINT)
                if error == "slow_down":
                    interval = min(interval + SLOW_DOWN_STEP, MAX_INTERVAL)
                last = f"HTTP {status}" + (f" {error}" if error else "")
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise DeadlineError("Handshake timed out before credentials were returned.",
                                    hint=f"Approve the request at {code.verification_uri} before it expires, then "
                                         "run `synth-ai setup` again (--timeout S waits longer).",
                                    details={"waited_s": round(limit, 1), "last_answer": last})
            self.sleep(min(interval, remaining))


def open_in_browser(url: str) -> bool:
    """Open `url` in the system browser; False when there is none to use (no display on Linux) or it fails."""
    import sys
    import webbrowser

    if urlsplit(url).scheme not in ("http", "https"):
        return False
    if sys.platform.startswith("linux") and not any(os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY",
                                                                                  "BROWSER")):
        return False  # a text-mode browser would take over the terminal
    try:
        return bool(webbrowser.open(url, new=2))
    except Exception:  # noqa: BLE001 - a browser that cannot start is not an error: the URL is printed
        return False


# Helpers ----------------------------------------------------------------------------------------------------------

def _client() -> httpx.Client:
    from synth_ai import __version__

    return httpx.Client(timeout=HTTP_TIMEOUT, follow_redirects=True,
                        headers={"User-Agent": f"synth-ai/{__version__}", "Accept": "application/json"})


def _credentials(doc: dict[str, Any], *, origin: str) -> Credentials:
    keys = doc.get("keys")
    if not isinstance(keys, dict):
        raise ServerError(f"Handshake token reply from {origin} is malformed: no `keys` object.", hint=_RETRY_HINT)
    synth = _key(keys.get("synth"), "keys.synth", origin)
    env = _key(keys.get("rl_env"), "keys.rl_env", origin)
    if synth is None:
        raise ServerError(f"Handshake token reply from {origin} is malformed: no `keys.synth` (SYNTH_API_KEY).",
                          hint=_RETRY_HINT)
    org = doc.get("org")
    name = _text(org.get("name")) if isinstance(org, dict) else ""
    name = "".join(ch for ch in name if ch.isprintable())[:200]
    return Credentials(organization=name or "your organization", synth_api_key=synth, environment_api_key=env)


def _key(value: Any, field_name: str, origin: str) -> str | None:
    if value is None or value == "":
        return None
    if (not isinstance(value, str) or len(value) > MAX_KEY_LENGTH or not value.strip()
            or any(not ch.isprintable() or ch.isspace() for ch in value.strip())):
        raise ServerError(f"Handshake token reply from {origin} is malformed: `{field_name}` is not a key.",
                          hint=_RETRY_HINT)
    return value.strip()


def _json_object(response: httpx.Response, *, what: str, origin: str) -> dict[str, Any]:
    try:
        doc = response.json()
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise ServerError(f"{what} reply from {origin} is malformed: not a JSON object.",
                          hint=f"Check that {origin} is the Synth website (--origin URL).")
    return doc


def _error_code(response: httpx.Response) -> str | None:
    """The RFC 8628 `error` of a reply (`authorization_pending`, `slow_down`, `access_denied`, ...), if any."""
    try:
        doc = response.json()
    except ValueError:
        return None
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        error = error.get("code")
    return error[:64] if isinstance(error, str) and error else None


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _seconds(value: Any, default: float, *, low: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return default
    try:
        number = float(value)
    except ValueError:
        return default
    if not math.isfinite(number) or number <= 0:
        return default
    return max(number, low)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _reason(exc: httpx.TransportError) -> str:
    kind = "no answer in time" if isinstance(exc, httpx.TimeoutException) else (
        "connection failed" if isinstance(exc, httpx.ConnectError) else type(exc).__name__)
    detail = str(exc).strip()
    return f"{kind} ({detail[:120]})" if detail else kind


def _snippet(response: httpx.Response) -> str:
    text = "".join(ch if ch.isprintable() else " " for ch in response.text[:200]).strip()
    return text or "(empty body)"
