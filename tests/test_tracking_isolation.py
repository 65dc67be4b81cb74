"""Each tracker on its own: one that hangs (a server that never answers) or cannot be reached delays neither the
other trackers nor the end of the run, and is dropped with one warning; a tracker dropped because of a folder it
cannot write says so instead of suggesting an install. Real TensorBoard event files and offline W&B runs, read
back; the hanging tracker is a stand-in for an external server, with the tracker's clock injected."""

from __future__ import annotations

import threading
from pathlib import Path

from backend_support import wait_for
from conftest import free_port
from tracking_support import tensorboard_scalars

from synth_ai.tracking.settings import resolve_tracking
from synth_ai.tracking.tracker import CALL_LIMIT_S, Tracker, make_sinks

POINTS = [("reward.mean", 0, 0.25, "train"), ("reward.mean", 1, 0.5, "train"), ("reward.mean", 2, 0.75, "train")]


class _ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _ServerThatNeverAnswers:
    """A tracker whose start blocks until released, as a client stuck in retries against a dead server does."""

    name = "mlflow"
    fix = "set MLFLOW_TRACKING_URI to a server it can reach"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls: list[str] = []

    def start(self, settings, config) -> None:
        self.calls.append("start")
        self.entered.set()
        self.release.wait(600)

    def log(self, step, values) -> None:
        self.calls.append("log")

    def table(self, table) -> None:
        self.calls.append("table")

    def finish(self, summary, tags, status) -> None:
        self.calls.append("finish")


def _settings(tmp_path: Path, *report_to: str, **logging):
    return resolve_tracking({"report_to": list(report_to), **logging}, run_id="job_iso", data_dir=tmp_path,
                            environ={})


def test_a_hanging_tracker_delays_neither_the_others_nor_the_end_of_the_run(tmp_path):
    settings = _settings(tmp_path, "tensorboard", "mlflow")
    hanging = _ServerThatNeverAnswers()
    clock = _ManualClock()
    warnings: list = []
    tracker = Tracker(settings, config={"model": "m"}, warn=lambda *w: warnings.append(w),
                      sinks=[*make_sinks(["tensorboard"]), hanging], clock=clock)
    try:
        assert hanging.entered.wait(60)
        tracker.points(POINTS)
        # TensorBoard writes while the other tracker hangs (before: one thread, so 0 points)
        wait_for(lambda: tensorboard_scalars(settings.tensorboard_dir).get("reward.mean") == {0: 0.25, 1: 0.5,
                                                                                             2: 0.75},
                 timeout=60, what="TensorBoard's points")
        assert warnings == []
        clock.now += CALL_LIMIT_S + 1  # the hanging call has now run past the limit
        tracker.close(status="succeeded", summary={"job_id": "job_iso"})  # returns without waiting on it
        assert len(warnings) == 1, warnings
        name, reason, fix = warnings[0]
        assert name == "mlflow" and f"did not answer within {CALL_LIMIT_S:.0f} s" in reason
        assert fix == hanging.fix
        assert tracker.failed == {"mlflow": reason} and [s.name for s in tracker.sinks] == ["tensorboard"]
        assert hanging.calls == ["start"]
    finally:
        hanging.release.set()


def test_an_unreachable_mlflow_server_is_dropped_at_once_and_tensorboard_gets_every_point(tmp_path, monkeypatch):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", dead)
    settings = _settings(tmp_path, "tensorboard", "mlflow")
    warnings: list = []
    tracker = Tracker(settings, config={"model": "m"}, warn=lambda *w: warnings.append(w))
    tracker.points(POINTS)
    tracker.close(status="succeeded", summary={"job_id": "job_iso"})
    assert [w[0] for w in warnings] == ["mlflow"], warnings
    assert f"cannot reach the MLflow tracking server at {dead}" in warnings[0][1]
    assert "MLFLOW_TRACKING_URI" in warnings[0][2] and "install" not in warnings[0][2]
    assert tensorboard_scalars(settings.tensorboard_dir)["reward.mean"] == {0: 0.25, 1: 0.5, 2: 0.75}


def test_an_unwritable_wandb_dir_or_tensorboard_folder_is_named_not_an_install_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    blocker = tmp_path / "a-file"  # a folder under a regular file cannot be made, even by root
    blocker.write_text("not a folder\n")
    settings = resolve_tracking({"report_to": ["tensorboard", "wandb"], "tensorboard_dir": str(blocker / "tb")},
                                run_id="job_iso", data_dir=tmp_path, environ={"WANDB_DIR": str(blocker / "wandb")})
    warnings: list = []
    tracker = Tracker(settings, config={"model": "m"}, warn=lambda *w: warnings.append(w))
    tracker.points(POINTS)
    tracker.close(status="succeeded")
    fixes = {name: fix for name, _reason, fix in warnings}
    assert set(fixes) == {"tensorboard", "wandb"}, warnings
    assert "install" not in fixes["tensorboard"] and "install" not in fixes["wandb"]
    assert str(blocker / "tb") in fixes["tensorboard"] and "[logging].tensorboard_dir" in fixes["tensorboard"]
    assert str(blocker / "wandb") in fixes["wandb"] and "WANDB_DIR" in fixes["wandb"]
