"""Secrets: canary keys set every way a user sets them never appear where they should not, and the files that hold
them are private from the moment they exist.

Canaries: `SYNTH_API_KEY` / `ENVIRONMENT_API_KEY` created by `setup --local` into a `--env-file`, an
`OPENAI_API_KEY` in the working directory's `.env`, a wrong `SYNTH_API_KEY` in the environment, and an
`ENVIRONMENT_API_KEY` given to a task app. After real commands against a real backend and task app (setup, config
validate, train dry-run and a real job creation, jobs list/get/events, the auth and network error paths, deploy's
offline dry-run, a traced rollout), each canary is searched in: stdout and stderr of every command, every log
record, every file of the data directory other than the credential files themselves (backend DB and its WAL,
job folders, logs, idempotency store), the trace DB, the Modal deploy script, job payloads and events as the API
returns them, and the reprs of the exceptions the SDK raises.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import traceback
from pathlib import Path
from typing import Any

import httpx
import pytest
from backend_support import BackendProcess
from conftest import run_cli
from taskapp_support import completion, scripted_model

REPO = Path(__file__).resolve().parents[2]
CREDENTIAL_FILES = {"backend_keys.json", "env_keys.json", "config.json", "env_key_box.json"}
OPENAI_CANARY = "sk-openai-canary-7c1f0e9a5b3d42a8"
WRONG_CANARY = "sk_wrong_canary_5e2d9b7c1a3f4e60"
APP_CANARY = "sk_env_app_canary_93b1c7d5e2f04a6b"


class Capture(logging.Handler):
    """Every log record of every logger, formatted with its arguments, at DEBUG."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record) + (repr(record.args) if record.args else ""))


@pytest.fixture
def captured_logs():
    handler = Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def _read_env(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip().strip("'\"")
    return values


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def _leaks(canaries: list[str], texts: dict[str, str | bytes]) -> list[str]:
    found = []
    for where, text in texts.items():
        data = text if isinstance(text, bytes) else text.encode("utf-8", "replace")
        found += [f"{canary[:12]}... in {where}" for canary in canaries if canary.encode() in data]
    return found


def test_canaries_never_leak(isolated_home: Path, captured_logs: Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = Path(os.environ["SYNTH_AI_HOME"])
    outputs: dict[str, str | bytes] = {}

    def cli(name: str, *args: str) -> Any:
        try:
            result = run_cli(*args)
        except Exception:  # SYNTH_DEBUG=1 lets the error through with its traceback: check that text too
            outputs[f"{name} traceback"] = traceback.format_exc()
            return None
        outputs[f"{name} stdout"], outputs[f"{name} stderr"] = result.stdout, result.stderr
        return result

    (isolated_home / ".env").write_text(f"OPENAI_API_KEY={OPENAI_CANARY}\n")  # the working directory's .env
    keys_env = isolated_home / "keys.env"
    assert cli("setup", "setup", "--local", "--env-file", str(keys_env)).exit_code == 0
    assert cli("setup again", "--json", "setup", "--local", "--env-file", str(keys_env)).exit_code == 0
    saved = _read_env(keys_env)
    synth_key, env_key = saved["SYNTH_API_KEY"], saved["ENVIRONMENT_API_KEY"]
    canaries = [synth_key, env_key, OPENAI_CANARY, WRONG_CANARY, APP_CANARY]

    backend = BackendProcess(data_dir, env={"SYNTH_AI_BACKEND_WARM_WORKER": "0"})
    backend.start()
    try:
        config = str(REPO / "examples" / "configs" / "sft_tiny_local.toml")
        dataset = str(REPO / "examples" / "datasets" / "sft_math_small.jsonl")
        common = ("--config", config, "--dataset", dataset, "--env-file", str(keys_env), "--backend", backend.url)
        assert cli("validate", "--json", "config", "validate", config).exit_code == 0
        assert cli("dry-run", "train", *common, "--dry-run").exit_code == 0
        assert cli("dry-run json", "--json", "train", *common, "--dry-run").exit_code == 0
        created = cli("train", "--json", "train", *common, "--no-poll")
        assert created.exit_code == 0, created.stderr
        job_id = created.json()["job_id"] if "job_id" in created.json() else created.json()["job"]["id"]
        for name, args in (("jobs list", ("jobs", "list")), ("jobs get", ("jobs", "get", job_id)),
                           ("jobs events", ("jobs", "events", job_id))):
            cli(name, "--json", *args, "--backend", backend.url, "--env-file", str(keys_env))
        with backend.client() as client:  # job payload and events as the API serves them
            outputs["job payload"] = client.get(f"/learning/jobs/{job_id}").text
            outputs["job events"] = client.get(f"/learning/jobs/{job_id}/events").text
            outputs["job config"] = client.get(f"/learning/jobs/{job_id}/config").text
            client.post(f"/learning/jobs/{job_id}/cancel")

        # A wrong key through the environment, and a backend that is not there: the errors must not echo them. The
        # CLI looks from another data dir: in this one the backend's record makes its URL the embedded backend,
        # whose own key file would be used instead of SYNTH_API_KEY.
        monkeypatch.setenv("SYNTH_API_KEY", WRONG_CANARY)
        monkeypatch.setenv("SYNTH_AI_HOME", str(isolated_home / "other-data-dir"))
        wrong = cli("wrong key", "--json", "jobs", "list", "--backend", backend.url)
        assert wrong.exit_code == 4, wrong.stdout + wrong.stderr
        cli("wrong key human", "jobs", "list", "--backend", backend.url)
        monkeypatch.setenv("SYNTH_DEBUG", "1")  # tracebacks shown: they must not carry the key either
        cli("unreachable", "jobs", "list", "--backend", "http://127.0.0.1:9")
        monkeypatch.delenv("SYNTH_DEBUG")
        monkeypatch.setenv("SYNTH_AI_HOME", str(data_dir))

        from synth_ai.client.transport import RetryPolicy, Transport
        from synth_ai.errors import SynthError

        for name, url in (("401", backend.url), ("connect", "http://127.0.0.1:9")):
            try:
                with Transport(f"{url}/api", WRONG_CANARY, retry=RetryPolicy(max_retries=0)) as transport:
                    transport.request("GET", "/learning/jobs")
            except SynthError as exc:
                chain, seen = [], exc
                while seen is not None:
                    chain.append(f"{seen!r} {seen} {getattr(seen, 'details', '')} {getattr(seen, 'request', '')}")
                    seen = seen.__cause__ or seen.__context__
                outputs[f"exception {name}"] = "\n".join(chain)
            else:
                pytest.fail(f"{name}: no error")
    finally:
        backend.stop()
    monkeypatch.delenv("SYNTH_API_KEY")

    # deploy's offline path: the generated Modal app and the printed command
    assert cli("deploy", "deploy", "crafter", "--dry-run", "--env-file", str(keys_env)).exit_code == 0
    cli("deploy json", "--json", "deploy", "crafter", "--dry-run", "--env-file", str(keys_env))

    # a traced rollout on a task app holding its own key, with the model's key in the policy config
    trace_db = isolated_home / "traces" / "rollouts.db"
    _traced_rollout(trace_db, monkeypatch)

    for path in _files(data_dir):
        if path.name not in CREDENTIAL_FILES:
            outputs[str(path.relative_to(data_dir))] = path.read_bytes()
    for path in _files(isolated_home):
        if path not in (keys_env, isolated_home / ".env"):
            outputs[str(path.relative_to(isolated_home))] = path.read_bytes()
    outputs["logs"] = "\n".join(captured_logs.lines)
    assert any(p.name.endswith("_modal.py") for p in _files(data_dir)), "deploy wrote no script to check"
    assert any("sqlite3" in name for name in outputs), "no backend DB checked"
    assert trace_db.exists()
    assert _leaks(canaries, outputs) == []
    # the keys really are where they belong (so the search above looked for the right strings)
    assert synth_key in (data_dir / "backend_keys.json").read_text()
    assert env_key in (data_dir / "env_keys.json").read_text()


def _traced_rollout(trace_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from synth_ai.taskapp.discovery import load_task_app
    from synth_ai.taskapp.server import create_task_app
    from synth_ai.taskapp.serving import running_in_background
    from synth_ai.taskapp.tracing import TracingSettings

    monkeypatch.setenv("ENVIRONMENT_API_KEY", APP_CANARY)
    entry = load_task_app("math-single-step")
    app = create_task_app(entry.config_factory(), tracing=TracingSettings(True, trace_db, None))
    with scripted_model(lambda body: completion("<answer>4</answer>")) as (model_url, _), \
            running_in_background(app) as url:
        body = {"run_id": "canary", "env": {"seed": 0, "config": {"split": "train"}},
                "policy": {"policy_name": "p", "config": {"model": "scripted-model", "inference_url": model_url,
                                                          "api_key": OPENAI_CANARY}},
                "ops": ["agent", "env"], "mode": "eval"}
        response = httpx.post(f"{url}/rollout", json=body, headers={"X-API-Key": APP_CANARY}, timeout=60)
        assert response.status_code == 200, response.text
        assert APP_CANARY not in response.text and OPENAI_CANARY not in response.text


# --- credential files: private from the first moment ------------------------------------------------------------

class _Modes:
    """Audit events for directories created and permission changes under one root."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.active = False
        self.events: list[tuple[str, str, int]] = []

    def __call__(self, event: str, args: tuple) -> None:
        if not self.active or event not in ("os.mkdir", "os.chmod"):
            return
        path = args[0]
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path).startswith(self.root):
            return
        if event == "os.mkdir" and os.path.isdir(path):  # `mkdir(exist_ok=True)` of a folder already there
            return
        mode = args[1]
        self.events.append((event, os.fspath(path), mode if isinstance(mode, int) else -1))


_AUDIT: _Modes | None = None


def _audit(event: str, args: tuple) -> None:
    if _AUDIT is not None:
        _AUDIT(event, args)


def test_credential_files_are_private_from_the_start(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With umask 0 (the worst a user can have), `setup --local` and the backend's first start create the data
    directory 0700 and every credential file 0600, never wider for a moment: no directory is made wider than
    0700 and then narrowed, no credential file is chmod-ed down after being written."""
    global _AUDIT
    home = isolated_home / "fresh-home"  # does not exist yet: created by the commands under test
    monkeypatch.setenv("SYNTH_AI_HOME", str(home))
    recorder = _Modes(home)
    if not getattr(sys, "_synth_secrets_audit", False):
        sys.addaudithook(_audit)  # audit hooks cannot be removed; this one is idle outside this test
        sys._synth_secrets_audit = True  # type: ignore[attr-defined]
    _AUDIT = recorder
    umask = os.umask(0)
    try:
        recorder.active = True
        result = run_cli("setup", "--local", "--env-file", str(isolated_home / "keys.env"))
        from synth_ai.backend.server_settings import BackendSettings

        BackendSettings.load(data_dir=home).ensure_dirs()
        recorder.active = False
    finally:
        os.umask(umask)
        _AUDIT = None
    assert result.exit_code == 0, result.stdout + result.stderr
    for event, path, mode in recorder.events:
        if event == "os.mkdir" and path in (str(home), str(home / "backend")):  # folders inside these are
            # already out of reach of group and others
            assert mode & 0o077 == 0, f"{path} created {oct(mode)} (group/others could enter before a chmod)"
        if event == "os.chmod":
            assert mode & 0o077 == 0, f"{path} chmod {oct(mode)}"
    for directory in [home, *(p for p in home.rglob("*") if p.is_dir())]:
        if directory == home or directory.name == "backend":
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    credentials = [p for p in home.rglob("*") if p.is_file() and p.name in CREDENTIAL_FILES]
    assert {p.name for p in credentials} >= {"backend_keys.json", "env_keys.json", "config.json"}
    for path in credentials + [isolated_home / "keys.env"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path, oct(path.stat().st_mode))
