"""One task-app outage is one `rl.taskapp.waiting` / `rl.taskapp.back` pair, also under async RL, where batches
whose rollouts were sent during the outage are collected after the app came back. `TaskAppWait` (the RL loop's
side of the wait) against a real HTTP server standing in for the task app's `/health`; the rollouts' runner
records what is sent again."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import free_port
from synth_ai.backend.trainers.rl.taskapp_wait import TaskAppWait
from synth_ai.backend.trainers.rl.types import Rollout


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def app_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _Reporter:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def event(self, type_: str, message: str, data: Any = None, level: str = "info") -> None:
        self.events.append((type_, message))


class _Runner:
    """Runs rollouts that now reach the app: each scores 1.0."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def run(self, jobs, *, mode: str, extra_policy=None) -> list[Rollout]:
        self.sent += [cid for _seed, _member, cid in jobs]
        return [Rollout(seed, member, cid, reward=1.0) for seed, member, cid in jobs]


def _wait(url: str, reporter: _Reporter) -> TaskAppWait:
    settings = SimpleNamespace(task_url=url, task_app_wait_s=60.0)
    return TaskAppWait(settings, SimpleNamespace(enabled=False, main=True), reporter, lambda: False)


def _lost(jobs: list[tuple[int, int, str]]) -> list[Rollout]:
    return [Rollout(seed, member, cid, error="connection refused", error_kind="unreachable")
            for seed, member, cid in jobs]


def test_rollouts_lost_to_an_outage_that_is_over_are_sent_again_without_another_waiting_pair(app_url):
    reporter, runner = _Reporter(), _Runner()
    wait = _wait(app_url, reporter)
    jobs = [(7, 0, "c7-0"), (7, 1, "c7-1"), (8, 0, "c8-0")]
    batch = _lost(jobs)
    batch[2] = Rollout(8, 0, "c8-0", reward=0.5)  # one got through before the app went away
    settled = wait.settle(runner, jobs, batch, it=4, mode="train")
    assert [r.reward for r in settled] == [1.0, 1.0, 0.5]
    assert runner.sent == ["c7-0-w1", "c7-1-w1"]
    assert reporter.events == [], "an app that answers was announced as waited for"


def test_an_app_that_is_down_is_still_announced_once(tmp_path):
    reporter, runner = _Reporter(), _Runner()
    wait = _wait(f"http://127.0.0.1:{free_port()}", reporter)  # nothing listens: a real outage
    wait.outage.window_s = 0.5  # give up quickly: the pair's first half is what is checked
    from synth_ai.backend.trainers.rl.rollouts import TaskAppUnavailable

    with pytest.raises(TaskAppUnavailable):
        wait.settle(runner, [(1, 0, "c1")], _lost([(1, 0, "c1")]), it=2, mode="train")
    assert [t for t, _m in reporter.events] == ["rl.taskapp.waiting"]
