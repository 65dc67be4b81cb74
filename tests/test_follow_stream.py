"""Watching a job live: the backend's server-sent-events stream (resume by Last-Event-ID, heartbeats, the end), the
client's fallback to polling when the route is missing, the progress bar on a terminal, NDJSON with --json, and
`jobs metrics --plot`.

A real `synth-ai backend serve` on a free port. Most jobs here are written into the backend's SQLite by the test
itself, the way a worker process writes them (the backend cannot tell), so the stream is exercised without minutes
of training; one tiny SFT job trains for real. Faults are injected at the HTTP transport only.
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
from pathlib import Path

import httpx
import pytest

from backend_support import TINY_TEXT, BackendProcess, job_store, serve_backend, wait_for
from conftest import REPO_ROOT, run_cli
from synth_ai.client.follow_stream import parse_frames

CONFIG = REPO_ROOT / "examples" / "configs" / "sft_tiny_local.toml"
DATASET = REPO_ROOT / "examples" / "datasets" / "sft_math_small.jsonl"


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    yield from serve_backend(tmp_path_factory, "stream", tiny=(TINY_TEXT,), env={"SYNTH_AI_BACKEND_WARM_WORKER": "0"})


@pytest.fixture
def key_env(backend: BackendProcess, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    return backend.key


@pytest.fixture(scope="module")
def store(backend: BackendProcess):
    yield from job_store(backend)


def _running_job(store, kind: str = "sft") -> str:
    with store.db.tx() as conn:
        job_id = store.insert(conn, kind=kind, training_type="sft_offline" if kind == "sft" else "rl",
                              model=TINY_TEXT, payload={}, files=[])
    store.transition(job_id, "running")
    return job_id


def _step(store, job_id: str, step: int) -> None:
    store.add_metrics(job_id, [("train.loss", step, 1.0 / (step + 1), "train"), ("learning_rate", step, 1e-4, "train")])
    store.add_event(job_id, "sft.progress", f"step {step + 1}/4", {"step": step + 1, "total_steps": 4})


def _frames(lines) -> list:
    return list(parse_frames(lines))


@pytest.fixture(scope="module")
def trained(backend: BackendProcess, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One real tiny SFT job, followed with --json (its NDJSON updates on stderr, one document on stdout)."""
    home = tmp_path_factory.mktemp("trained-home")
    with pytest.MonkeyPatch.context() as patch:  # module scope: set up what `isolated_home` gives a test
        patch.setenv("HOME", str(home))
        patch.setenv("SYNTH_AI_HOME", str(home / ".synth-ai"))
        patch.setenv("SYNTH_API_KEY", backend.key)
        patch.chdir(home)
        result = run_cli("--json", "train", "--config", str(CONFIG), "--dataset", str(DATASET), "--backend",
                         backend.url, "--examples", "4", "--idempotency", "stream-tests")
    assert result.exit_code == 0, result.stdout + result.stderr
    return {"doc": json.loads(result.stdout), "stderr": result.stderr}


def test_stream_resumes_from_last_event_id_without_gaps_or_repeats(backend: BackendProcess, store) -> None:
    job_id = _running_job(store)
    _step(store, job_id, 0)
    _step(store, job_id, 1)
    with backend.client() as client, client.stream("GET", f"/learning/jobs/{job_id}/events/stream") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        first = []
        lines = response.iter_lines()
        for frame in parse_frames(lines):
            first.append(frame)
            if frame.kind == "metric" and frame.data["step"] == 1 and frame.data["name"] == "train.loss":
                break
    assert first[0].kind == "status" and first[0].data["status"] == "running"
    cursor = first[-1].id
    # Written while nobody listens: the reconnect gets exactly these, then the end.
    _step(store, job_id, 2)
    store.add_event(job_id, "sft.checkpoint.saved", "Checkpoint saved at step 3.", {"step": 3})
    store.transition(job_id, "succeeded", fine_tuned_model=f"ft:{TINY_TEXT}:{job_id}")
    with backend.client() as client:
        text = client.get(f"/learning/jobs/{job_id}/events/stream", headers={"Last-Event-ID": cursor}).text
    rest = _frames(text.splitlines())
    seen = [(f.kind, f.data.get("seq"), f.data.get("name"), f.data.get("step"))
                                for f in first + rest if f.kind in ("event", "metric")]
    with backend.client() as client:
        events = client.get(f"/learning/jobs/{job_id}/events").json()["events"]
        points = client.get(f"/learning/jobs/{job_id}/metrics").json()["points"]
    assert [seq for kind, seq, _, _ in seen if kind == "event"] == [e["seq"] for e in events]
    assert sorted((name, step) for kind, _, name, step in seen if kind == "metric") == sorted((p["name"], p["step"]) for p in points)
    assert rest[0].kind == "status" and rest[0].data["status"] == "succeeded"
    assert rest[-1].kind == "end" and rest[-1].data["status"] == "succeeded"
    # ?since_seq resumes the events alone; a cursor that is not one is refused with the fix.
    with backend.client() as client:
        later = _frames(client.get(f"/learning/jobs/{job_id}/events/stream",
                                   params={"since_seq": events[-2]["seq"]}).text.splitlines())
        bad = client.get(f"/learning/jobs/{job_id}/events/stream", headers={"Last-Event-ID": "yesterday"})
    assert [f.data["seq"] for f in later if f.kind == "event"] == [events[-1]["seq"]]
    assert bad.status_code == 400 and "Last-Event-ID" in bad.json()["error"]["message"]


def test_stream_sends_news_as_written_and_heartbeats_between(backend: BackendProcess, store) -> None:
    job_id = _running_job(store, kind="rl")
    seen: list = []

    def read() -> None:
        with backend.client() as client, client.stream("GET", f"/rl/jobs/{job_id}/events/stream",
                                                       params={"heartbeat": 0.2}) as response:
            seen.extend(parse_frames(response.iter_lines()))

    reader = threading.Thread(target=read)
    reader.start()
    # quiet: only keep-alives (waited for, not slept on: a fixed pause saw just one on a loaded machine)
    wait_for(lambda: [f.kind for f in seen].count("keep-alive") >= 2, timeout=30, interval=0.02,
             what="two keep-alives")
    store.add_metrics(job_id, [("reward.mean", 0, 0.5, "train")])
    store.transition(job_id, "failed", error="task app went away")
    reader.join(timeout=30)
    kinds = [f.kind for f in seen]
    assert kinds.count("keep-alive") >= 2
    assert kinds.index("keep-alive") < kinds.index("metric") < kinds.index("end")
    assert seen[-1].data["status"] == "failed"
    with backend.client() as client:  # the learning route serves RL jobs too (test_jobs_any_kind.py), same auth
        assert _frames(client.get(f"/learning/jobs/{job_id}/events/stream").text.splitlines())[-1].kind == "end"
    assert httpx.get(f"{backend.url}/api/rl/jobs/{job_id}/events/stream").status_code == 401


class _HostedLike(httpx.BaseTransport):
    """The real server, except that the stream route answers 404 as on a backend without it (the hosted one)."""

    def __init__(self) -> None:
        self.real = httpx.HTTPTransport()
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if request.url.path.endswith("/events/stream"):
            return httpx.Response(404, json={"detail": "Not Found"})
        return self.real.handle_request(request)


def test_follow_falls_back_to_polling_when_the_stream_route_is_missing(backend: BackendProcess, store, key_env: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import synth_ai.client.transport as transport

    job_id = _running_job(store)

    def train() -> None:
        for step in range(4):
            time.sleep(0.1)
            _step(store, job_id, step)
        store.transition(job_id, "succeeded", fine_tuned_model=f"ft:{TINY_TEXT}:{job_id}")

    hosted = _HostedLike()
    monkeypatch.setattr(transport, "HTTP_TRANSPORT_OVERRIDE", hosted)
    writer = threading.Thread(target=train)
    writer.start()
    result = run_cli("jobs", "follow", job_id, "--poll-interval", "0.1", "--backend", backend.url)
    writer.join()
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "Final status: succeeded" in result.stdout
    assert f"fine_tuned_model: ft:{TINY_TEXT}:{job_id}" in result.stdout
    assert sum(p.endswith("/events/stream") for p in hosted.paths) == 1, "one try, then polling"
    assert sum(p.endswith(f"{job_id}/events") for p in hosted.paths) >= 2
    for step in range(4):  # the poller shows every point (plain lines: stdout is not a terminal)
        assert f"train.loss={1.0 / (step + 1):.4g} (step={step})" in result.stdout


class _DropStreamOnce(httpx.BaseTransport):
    """The real server, except that the first stream connection breaks after its first few lines."""

    def __init__(self) -> None:
        self.real = httpx.HTTPTransport()
        self.resumed_from: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.real.handle_request(request)
        if not request.url.path.endswith("/events/stream"):
            return response
        self.resumed_from.append(request.headers.get("Last-Event-ID"))
        if len(self.resumed_from) > 1:
            return response
        chunks = response.stream

        class Broken(httpx.SyncByteStream):
            def __iter__(self):
                for count, chunk in enumerate(chunks):
                    if count == 3:
                        raise httpx.ReadError("connection reset")
                    yield chunk

            def close(self) -> None:
                chunks.close()

        return httpx.Response(response.status_code, headers=response.headers, stream=Broken())


def test_client_reconnects_with_last_event_id_and_shows_everything_once(backend: BackendProcess, store,
                                                                          key_env: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import synth_ai.client.transport as transport
    from synth_ai.client.follow import follow_job
    from synth_ai.client.resources import SynthAPI

    job_id = _running_job(store)
    for step in range(4):
        _step(store, job_id, step)
    store.transition(job_id, "succeeded")
    drop = _DropStreamOnce()
    monkeypatch.setattr(transport, "HTTP_TRANSPORT_OVERRIDE", drop)
    updates: list = []
    with transport.Transport(f"{backend.url}/api", key_env) as t:
        result = follow_job(SynthAPI(t).sft, job_id, interval=60, timeout=60, on_update=updates.append,
                            sleep=lambda _s: None)
    assert result.status == "succeeded"
    assert drop.resumed_from[0] is None and re.fullmatch(r"\d+\.\d+\.\d+", drop.resumed_from[1] or "")
    with backend.client() as client:
        events = client.get(f"/learning/jobs/{job_id}/events").json()["events"]
    assert [u.data["seq"] for u in updates if u.kind == "event"] == [e["seq"] for e in events]
    assert sorted((u.data["name"], u.data["step"]) for u in updates if u.kind == "metric") == \
        sorted((name, step) for step in range(4) for name in ("learning_rate", "train.loss"))


def test_json_follow_writes_ndjson_updates(trained: dict) -> None:
    updates = [json.loads(line) for line in trained["stderr"].splitlines() if line.startswith("{")]
    kinds = {u["kind"] for u in updates}
    assert {"status", "event", "metric"} <= kinds
    assert trained["doc"]["status"] == "succeeded" and trained["doc"]["fine_tuned_model"]
    steps = sorted({u["step"] for u in updates if u["kind"] == "metric" and u["name"] == "train.loss"})
    assert steps == list(range(len(steps))) and steps, "every step's loss arrives, in NDJSON"


def test_progress_bar_on_a_terminal(backend: BackendProcess, key_env: str, trained: dict) -> None:
    from rich.console import Console

    from synth_ai.cli.follow_view import follow_and_report
    from synth_ai.cli.output import Output
    from synth_ai.client.resources import SynthAPI
    from synth_ai.client.transport import Transport

    job_id = trained["doc"]["job_id"]
    out, screen = Output(), io.StringIO()
    out._out = Console(file=screen, force_terminal=True, width=160)  # what a terminal gets
    with Transport(f"{backend.url}/api", key_env) as t:
        doc = follow_and_report(out, SynthAPI(t).sft, job_id, interval=60, timeout=60, stream_format="auto")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    total = max(u["data"]["total_steps"] for u in _ndjson_events(trained, "sft.progress"))
    assert doc["status"] == "succeeded"
    assert re.search(rf"{job_id} step .*━.* {total}/{total} eta .*epoch [\d.]+ +[\d,]+ tok/s +loss [\d.]+", text), text
    assert "sft.job.completed" in text, "events print above the bar"
    assert "train.loss=" not in text, "metric points move the bar instead of printing lines"


def _ndjson_events(trained: dict, type_: str) -> list[dict]:
    return [u for u in (json.loads(line) for line in trained["stderr"].splitlines() if line.startswith("{"))
            if u["kind"] == "event" and u.get("type") == type_]


def test_metrics_plot_writes_a_png(backend: BackendProcess, key_env: str, trained: dict, tmp_path: Path,
                                   store) -> None:
    from PIL import Image

    job_id = trained["doc"]["job_id"]
    path = tmp_path / "charts" / "curves.png"
    result = run_cli("jobs", "metrics", job_id, "--plot", str(path), "--backend", backend.url)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        assert image.size == (640, 2 * 360), "two panels for SFT: loss and learning rate"
        rgb = image.convert("RGB")
        for top in (0, 360):  # each panel has its curve drawn
            colours = {colour for _, colour in rgb.crop((0, top, 640, top + 360)).getcolors(maxcolors=1 << 16)}
            assert (37, 99, 235) in colours
    empty = _running_job(store)
    missing = run_cli("jobs", "metrics", empty, "--plot", str(tmp_path / "none.png"), "--backend", backend.url)
    assert missing.exit_code == 8
    assert f"Job {empty} has no metric points to plot" in missing.stderr
    assert not (tmp_path / "none.png").exists()
    store.transition(empty, "cancelled")
