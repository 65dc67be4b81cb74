"""`synth-ai train` submitting and following real jobs on a real embedded backend (a `synth-ai backend serve`
subprocess on a free port, real SQLite, real training of the tiny local model).

Faults are injected at the HTTP transport (`synth_ai.client.transport.HTTP_TRANSPORT_OVERRIDE` wrapping a real
`httpx.HTTPTransport`): the backend itself is never replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from backend_support import (
    TINY_TEXT,
    BackendProcess,
    build_tiny_models,
    cancel_unfinished_sft,
    link_tiny,
    serve_backend,
    wait_for,
)
from conftest import REPO_ROOT, free_port, run_cli

CONFIG = REPO_ROOT / "examples" / "configs" / "sft_tiny_local.toml"
DATASET = REPO_ROOT / "examples" / "datasets" / "sft_math_small.jsonl"
ENV_KEY = "sk_env_train_client_0123456789abcdef"
RL_CONFIG = REPO_ROOT / "examples" / "configs" / "rl_text_qwen3_4b.toml"


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    yield from serve_backend(tmp_path_factory, "backend", tiny=(TINY_TEXT,), env={"ENVIRONMENT_API_KEY": ENV_KEY})


@pytest.fixture(autouse=True)
def _no_job_left_training(request: pytest.FixtureRequest):
    yield
    if "backend" in request.fixturenames:
        cancel_unfinished_sft(request.getfixturevalue("backend"))


@pytest.fixture
def key_env(backend: BackendProcess, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    return backend.key


def _train(backend: BackendProcess, *extra: str):
    return run_cli("train", "--config", str(CONFIG), "--dataset", str(DATASET), "--backend", backend.url,
                   "--poll-interval", "0.2", *extra)


def _jobs(backend: BackendProcess) -> list[dict]:
    with backend.client() as client:
        return client.get("/learning/jobs", params={"limit": 200}).json()["data"]


def _files(backend: BackendProcess) -> list[dict]:
    with backend.client() as client:
        doc = client.get("/files", params={"limit": 1000}).json()
    return doc.get("data", doc.get("files", []))


def test_sft_end_to_end_succeeds_with_fine_tuned_model(backend: BackendProcess, key_env: str) -> None:
    result = _train(backend)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "✓ Job created" in result.stdout
    assert "Final status: succeeded" in result.stdout
    assert "fine_tuned_model: ft:synth-ai/tiny-qwen3:job_" in result.stdout
    assert "train.loss=" in result.stdout
    assert key_env not in result.stdout + result.stderr


def test_no_poll_prints_job_then_jobs_commands_follow_it(backend: BackendProcess, key_env: str) -> None:
    result = _train(backend, "--no-poll", "--json", "--idempotency", "no-poll-test-1")
    assert result.exit_code == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    job_id = doc["job_id"]
    assert doc["type"] == "sft" and doc["backend"] == f"{backend.url}/api"

    got = run_cli("--json", "jobs", "get", job_id, "--backend", backend.url)
    assert got.exit_code == 0 and got.json()["id"] == job_id

    followed = run_cli("jobs", "events", job_id, "--follow", "--poll-interval", "0.2", "--backend", backend.url)
    assert followed.exit_code == 0, followed.stdout + followed.stderr
    assert "Final status: succeeded" in followed.stdout

    events = run_cli("--json", "jobs", "events", job_id, "--backend", backend.url)
    types = [e["type"] for e in events.json()["events"]]
    assert "sft.job.created" in types and "sft.job.completed" in types
    metrics = run_cli("--json", "jobs", "metrics", job_id, "--name", "train.loss", "--backend", backend.url)
    steps = [p["step"] for p in metrics.json()["points"]]
    assert steps and steps[0] == 0, "metric step 0 must be kept"


def test_examples_uploads_only_the_first_records(backend: BackendProcess, key_env: str) -> None:
    before = {f["id"] for f in _files(backend)}
    result = _train(backend, "--examples", "5", "--no-poll", "--json", "--idempotency", "examples-test")
    assert result.exit_code == 0, result.stdout + result.stderr
    new = [f for f in _files(backend) if f["id"] not in before]
    assert len(new) == 1
    expected = b"".join(DATASET.read_bytes().splitlines(keepends=True)[:5])
    assert new[0]["bytes"] == len(expected)


def test_bad_dataset_is_refused_with_line_numbers_and_nothing_uploaded(backend: BackendProcess, key_env: str,
                                                                       tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
    bad.write_text(good + "\n{not json\n" + json.dumps({"messages": "nope"}) + "\n")
    before = len(_files(backend))
    result = run_cli("train", "--config", str(CONFIG), "--dataset", str(bad), "--backend", backend.url)
    assert result.exit_code == 3
    assert "Line 2" in result.stderr and "Line 3" in result.stderr
    assert "nothing was uploaded" in result.stderr
    assert len(_files(backend)) == before


def test_dead_backend_is_a_network_error(key_env: str) -> None:
    result = run_cli("train", "--config", str(CONFIG), "--dataset", str(DATASET),
                     "--backend", f"http://127.0.0.1:{free_port()}")
    assert result.exit_code == 5
    assert "Cannot reach the backend" in result.stderr
    assert "Traceback" not in result.stderr


def test_wrong_key_is_an_auth_error(backend: BackendProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", "sk_local_wrong_key_0000000000000000")
    result = _train(backend, "--no-poll")
    assert result.exit_code == 4
    assert "refused the API key" in result.stderr
    assert "sk_local_wrong_key_0000000000000000" not in result.stderr


def test_poll_timeout_ends_with_resume_command(backend: BackendProcess, key_env: str, tmp_path: Path) -> None:
    long = tmp_path / "long.toml"
    long.write_text(CONFIG.read_text().replace("n_epochs = 3", "n_epochs = 400"))
    result = run_cli("train", "--config", str(long), "--dataset", str(DATASET), "--backend", backend.url,
                     "--poll-interval", "0.1", "--poll-timeout", "3")  # the whole command's deadline: room to submit
    assert result.exit_code == 7, result.stdout + result.stderr
    assert "--poll-timeout" in result.stderr
    assert "synth-ai jobs follow job_" in result.stderr
    job_id = result.stderr.split("synth-ai jobs follow ")[1].split()[0]
    # The resume command reaches the same backend (a bare one would ask the default backend, not --backend's).
    assert f"synth-ai jobs follow {job_id} --backend {backend.url}/api" in result.stderr
    cancelled = run_cli("--json", "jobs", "cancel", job_id, "--backend", backend.url)
    assert cancelled.exit_code == 0
    with backend.client() as client:
        wait_for(lambda: client.get(f"/learning/jobs/{job_id}").json()["status"] == "cancelled", what="cancel")
    followed = run_cli("jobs", "follow", job_id, "--backend", backend.url)  # the resume command, as printed
    assert followed.exit_code == 6, "a cancelled job exits with the job-failed code"
    assert f"synth-ai jobs events {job_id} --backend {backend.url}/api" in followed.stderr


class _Faults(httpx.BaseTransport):
    """Forwards to the real server, except for the faults planned for the first matching requests."""

    def __init__(self, plan: list[str], match: tuple[str, str]) -> None:
        self.real = httpx.HTTPTransport()
        self.plan = list(plan)
        self.match = match
        self.seen_keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if (request.method, request.url.path) == self.match:
            self.seen_keys.append(request.headers.get("Idempotency-Key"))
            if self.plan:
                fault = self.plan.pop(0)
                if fault == "429":
                    return httpx.Response(429, headers={"Retry-After": "0"}, json={"detail": "slow down"})
                if fault == "503":
                    return httpx.Response(503, json={"detail": "busy"})
                if fault == "503-unparseable-retry-after":
                    return httpx.Response(503, headers={"Retry-After": "soon"}, json={"detail": "busy"})
                if fault == "reset":
                    raise httpx.ConnectError("connection reset by peer", request=request)
                if fault == "timeout-after-commit":
                    request.read()
                    self.real.handle_request(request).close()  # the server acts...
                    raise httpx.ReadTimeout("timed out reading the answer", request=request)  # ...we never hear
        return self.real.handle_request(request)


@pytest.mark.parametrize("fault", ["429", "503", "503-unparseable-retry-after", "reset", "timeout-after-commit"])
def test_job_created_exactly_once_despite_transport_faults(backend: BackendProcess, key_env: str,
                                                            monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    import synth_ai.client.transport as transport

    faults = _Faults([fault], ("POST", "/api/learning/jobs"))
    monkeypatch.setattr(transport, "HTTP_TRANSPORT_OVERRIDE", faults)
    monkeypatch.setattr(transport.RetryPolicy, "backoff", lambda self, attempt: 0.01)
    before = {j["id"] for j in _jobs(backend)}
    result = _train(backend, "--no-poll", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    created = [j for j in _jobs(backend) if j["id"] not in before]
    assert len(created) == 1, f"{fault}: expected one job, got {len(created)}"
    assert json.loads(result.stdout)["job_id"] == created[0]["id"]
    assert len(faults.seen_keys) == 2 and faults.seen_keys[0] == faults.seen_keys[1] is not None


def test_rerunning_after_a_crash_finds_the_same_job(backend: BackendProcess, key_env: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that dies after the create (here: the start call fails for good) is resumed by re-running."""
    import synth_ai.client.transport as transport

    class _DieOnStart(httpx.BaseTransport):
        real = httpx.HTTPTransport()

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/start"):
                raise httpx.ConnectError("network down", request=request)
            return self.real.handle_request(request)

    monkeypatch.setattr(transport.RetryPolicy, "backoff", lambda self, attempt: 0.0)
    before = {j["id"] for j in _jobs(backend)}
    monkeypatch.setattr(transport, "HTTP_TRANSPORT_OVERRIDE", _DieOnStart())
    first = _train(backend, "--no-poll")
    assert first.exit_code == 5
    monkeypatch.setattr(transport, "HTTP_TRANSPORT_OVERRIDE", None)
    second = _train(backend, "--no-poll", "--json")
    assert second.exit_code == 0, second.stdout + second.stderr
    created = [j for j in _jobs(backend) if j["id"] not in before]
    assert len(created) == 1
    assert json.loads(second.stdout)["job_id"] == created[0]["id"]


def test_ctrl_c_detaches_without_cancelling(backend: BackendProcess, key_env: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import synth_ai.client.transport as transport

    class _InterruptOnEvents(httpx.BaseTransport):
        real = httpx.HTTPTransport()

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.method == "GET" and "/events" in request.url.path:  # the poll or the live stream
                raise KeyboardInterrupt
            return self.real.handle_request(request)

    long = tmp_path / "long.toml"
    long.write_text(CONFIG.read_text().replace("n_epochs = 3", "n_epochs = 400"))
    monkeypatch.setattr(transport, "HTTP_TRANSPORT_OVERRIDE", _InterruptOnEvents())
    result = run_cli("train", "--config", str(long), "--dataset", str(DATASET), "--backend", backend.url)
    assert result.exit_code == 130
    assert "Detached from job" in result.stderr and "keeps running" in result.stderr
    job_id = result.stderr.split("Resume with: synth-ai jobs follow ")[1].split()[0]
    with backend.client() as client:
        assert client.get(f"/learning/jobs/{job_id}").json()["status"] in {"queued", "running"}
        client.post(f"/learning/jobs/{job_id}/cancel")


def test_client_leaves_no_secret_in_files_it_writes(backend: BackendProcess, key_env: str,
                                                    isolated_home: Path) -> None:
    result = _train(backend, "--no-poll")
    assert result.exit_code == 0
    home = Path(isolated_home).parent / "home"
    written = [p for p in home.rglob("*") if p.is_file()]
    assert written, "the client keeps idempotency keys in its data dir"
    for path in written:
        assert key_env not in path.read_text(errors="replace"), path
    assert key_env not in backend.log()


@pytest.fixture(scope="module")
def math_app():
    """The bundled math task app, served by `synth-ai serve` in its own process with its own key."""
    from taskapp_support import served_app

    with served_app("math-single-step", ENV_KEY, cwd=REPO_ROOT) as url:
        yield url


@pytest.fixture
def env_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    return ENV_KEY


def test_rl_path_verifies_checks_and_reaches_the_backend(backend: BackendProcess, key_env: str, env_key: str,
                                                          math_app: str, tmp_path: Path, require_vllm: None) -> None:
    # the docs' 4B config with a model this CPU backend accepts (a 4B job is refused at create: nothing here runs it);
    # its [vllm] table is refused where vllm is not installed, so the test needs vllm (require_vllm)
    config = tmp_path / "rl_small.toml"
    config.write_text(RL_CONFIG.read_text().replace('base = "Qwen/Qwen3-4B"', 'base = "Qwen/Qwen3-0.6B"'))
    result = run_cli("train", "--type", "rl", "--config", str(config), "--task-url", math_app,
                     "--backend", backend.url, "--no-poll")
    assert "Verification OK" in result.stdout, result.stdout + result.stderr
    assert "Task app healthy" in result.stdout
    assert "Sharing ENVIRONMENT_API_KEY (sk_e…ef) with the backend, sealed" in result.stdout
    assert "Creating the job: POST" in result.stdout
    # The backend probes the math app with the key it was given and queues the job (--no-poll: the client prints its
    # id and leaves); it is cancelled here (its 0.6B model is not here to train).
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "rljob_" in result.stdout and "(polling disabled)" in result.stdout
    assert ENV_KEY not in result.stdout + result.stderr
    job_id = result.stdout.split("Started job ", 1)[1].split()[0]
    run_cli("jobs", "cancel", job_id, "--kind", "rl", "--backend", backend.url)  # 409 if it already failed


def test_rl_with_a_wrong_environment_key_fails_the_local_check(backend: BackendProcess, key_env: str,
                                                               math_app: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "sk_env_wrong_key_not_accepted_000")
    result = run_cli("train", "--type", "rl", "--config", str(RL_CONFIG), "--task-url", math_app,
                     "--backend", backend.url, "--no-poll")
    assert result.exit_code == 4, result.stdout + result.stderr
    assert "Task app check failed" in result.stderr


def test_rl_with_a_dead_task_app_is_refused_before_any_job(backend: BackendProcess, key_env: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    result = run_cli("train", "--type", "rl", "--config", str(RL_CONFIG), "--task-url",
                     f"http://127.0.0.1:{free_port()}", "--backend", backend.url, "--no-poll")
    # checked locally first (nothing listens: a network error), so no key is shared and no job is created
    assert result.exit_code == 5, result.stdout + result.stderr
    assert "Task app check failed: health" in result.stderr
    assert "Sharing ENVIRONMENT_API_KEY" not in result.stdout and "Creating the job" not in result.stdout


def test_chart_stream_format_follows_to_the_end(backend: BackendProcess, key_env: str) -> None:
    result = _train(backend, "--stream-format", "chart", "--idempotency", "chart-run")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "Using live loss chart (metric=train.loss)" in result.stdout
    assert "Final status: succeeded" in result.stdout


def test_chart_stops_when_following_ends_in_an_error(backend: BackendProcess, key_env: str) -> None:
    """A follow that ends in an error (here: no such job) stops the live chart; a running one would keep redrawing
    over the error and leave the terminal's cursor hidden."""
    import threading

    from rich.live import _RefreshThread

    result = run_cli("jobs", "events", "job_does_not_exist", "--follow", "--stream-format", "chart",
                     "--backend", backend.url)
    assert result.exit_code == 8, result.stdout + result.stderr
    assert "Using live loss chart" in result.stdout
    # rich's Live.stop() tells its refresh thread to end without joining it: a stopped one ends at once, a running
    # one (the bug) redraws until the process exits.
    for thread in [t for t in threading.enumerate() if isinstance(t, _RefreshThread)]:
        thread.join(timeout=10)
    assert not [t for t in threading.enumerate() if isinstance(t, _RefreshThread) and t.is_alive()]


def test_follow_shows_every_event_and_metric_point_across_pages(backend: BackendProcess, key_env: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Small pages: a finished job is still shown whole (not one page), and a page ending inside a step loses none
    of that step's points."""
    from synth_ai.client import follow
    from synth_ai.client.resources import SynthAPI
    from synth_ai.client.transport import Transport

    done = _train(backend, "--json", "--idempotency", "follow-pages")
    assert done.exit_code == 0, done.stdout + done.stderr
    job_id = json.loads(done.stdout)["job_id"]
    with backend.client() as client:
        points = client.get(f"/learning/jobs/{job_id}/metrics", params={"limit": 5000}).json()["points"]
        events = client.get(f"/learning/jobs/{job_id}/events", params={"limit": 1000}).json()["events"]
    assert len(points) > 8 and len(events) > 5
    monkeypatch.setattr(follow, "METRICS_PAGE", 4)  # 3 metrics per step: pages end inside steps
    monkeypatch.setattr(follow, "EVENTS_PAGE", 5)
    updates: list = []
    with Transport(f"{backend.url}/api", key_env) as transport:
        result = follow.follow_job(SynthAPI(transport).sft, job_id, interval=0.01, timeout=60,
                                   on_update=updates.append, sleep=lambda _s: None, stream=False)
    assert result.status == "succeeded"
    assert sorted((u.data["name"], u.data["step"]) for u in updates if u.kind == "metric") == \
        sorted((p["name"], p["step"]) for p in points)
    assert [u.data["seq"] for u in updates if u.kind == "event"] == [e["seq"] for e in events]


def test_keys_saved_by_setup_are_found_without_a_dotenv(backend: BackendProcess, monkeypatch: pytest.MonkeyPatch,
                                                        isolated_home: Path) -> None:
    """`synth-ai setup` writes ~/.synth-ai/config.json; train finds SYNTH_API_KEY there when nothing else has it."""
    from synth_ai.env.paths import data_dir

    (data_dir() / "config.json").write_text(json.dumps({"SYNTH_API_KEY": backend.key}))
    monkeypatch.delenv("SYNTH_API_KEY", raising=False)
    result = _train(backend, "--no-poll", "--idempotency", "saved-key-run")
    assert result.exit_code == 0, result.stdout + result.stderr


def test_files_list_and_get_show_uploads(backend: BackendProcess, key_env: str, tmp_path: Path) -> None:
    import hashlib

    result = _train(backend, "--no-poll", "--idempotency", "files-listing")
    assert result.exit_code == 0, result.stdout + result.stderr
    listed = run_cli("--json", "files", "list", "--backend", backend.url)
    assert listed.exit_code == 0, listed.stdout + listed.stderr
    digest = hashlib.sha256(DATASET.read_bytes()).hexdigest()
    mine = [f for f in listed.json()["data"] if f.get("sha256") == digest]
    assert mine, "the uploaded dataset is listed with its sha256"
    got = run_cli("--json", "files", "get", mine[0]["id"], "--backend", backend.url)
    assert got.exit_code == 0 and got.json()["status"] == "ready"

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": []}\n')
    with backend.client() as client, bad.open("rb") as handle:
        uploaded = client.post("/files", files={"file": ("bad.jsonl", handle, "application/jsonl")},
                               data={"purpose": "fine-tune"}).json()
    shown = run_cli("files", "get", uploaded["id"], "--backend", backend.url)
    assert shown.exit_code == 0
    assert "invalid" in shown.stdout and "Line 1" in shown.stdout
    missing = run_cli("files", "get", "file_does_not_exist", "--backend", backend.url)
    assert missing.exit_code == 8


def test_train_starts_the_embedded_backend_when_none_answers(tmp_path_factory: pytest.TempPathFactory,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """No backend configured and none running: `train` starts the embedded one in the background and says so."""
    from synth_ai.env.paths import data_dir

    port = free_port()
    monkeypatch.setenv("SYNTH_AI_BACKEND_PORT", str(port))
    link_tiny(data_dir(), build_tiny_models(tmp_path_factory.getbasetemp() / "ml-core-data", (TINY_TEXT,)))
    try:
        result = run_cli("train", "--config", str(CONFIG), "--dataset", str(DATASET), "--poll-interval", "0.2")
        assert result.exit_code == 0, result.stdout + result.stderr
        assert f"starting the embedded backend on 127.0.0.1:{port}" in result.stdout
        assert f"Backend: http://127.0.0.1:{port}/api (embedded default)" in result.stdout
        assert "Final status: succeeded" in result.stdout
        status = run_cli("--json", "backend", "status")
        assert status.json()["running"] is True and status.json()["port"] == port
        again = run_cli("--json", "jobs", "list")
        assert again.exit_code == 0 and len(again.json()["data"]) == 1, "read-only commands find it too"
    finally:
        stopped = run_cli("backend", "stop")
    assert stopped.exit_code == 0


def test_rerun_says_it_found_the_earlier_job_and_a_new_key_trains_again(backend: BackendProcess,
                                                                        key_env: str) -> None:
    first = _train(backend, "--no-poll", "--json")
    second = _train(backend, "--no-poll", "--json")
    assert first.exit_code == second.exit_code == 0, second.stdout + second.stderr
    assert json.loads(first.stdout)["job_id"] == json.loads(second.stdout)["job_id"]
    assert "Same job as an earlier run of this command" in second.stderr
    third = _train(backend, "--no-poll", "--json", "--idempotency", "deliberately-new-run")
    assert third.exit_code == 0
    assert json.loads(third.stdout)["job_id"] != json.loads(first.stdout)["job_id"]
    assert "✓ Job created" in third.stderr
