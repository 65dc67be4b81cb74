"""Rollout prefetch: the batcher's hold/release (nothing admitted while held, the held jobs start as one batch), and
the GSPO loop that sends iteration k+1's rollouts during iteration k's update (the color-quiz app over HTTP, the
loop's trainer and rollout engine `fake_rl.py`'s fakes, whose updates last until the prefetched rollouts reached
the app): the same samples as without it, none before an evaluation that is due, a stop or an error while it is
in flight leaves no thread and no policy port behind, and its failed rollouts are reported."""

from __future__ import annotations

import collections
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import pytest

from backend_support import TINY_TEXT
from fake_rl import WAIT_S, FakeRL
from rl_support import Recorder, quiz_app, run_in_process
from taskapp_support import running_app

pytestmark = pytest.mark.slow
pytest.importorskip("torch")  # the batcher's and the built-in engine's tests

ENV_KEY = "sk_env_rl_prefetch_0123456789"
PREFETCH_THREAD = "rl-rollout-prefetch"


@pytest.fixture(scope="module")
def loaded_tiny(tiny_text_models: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    from synth_ai.backend.inference.engine import InferenceEngine
    from synth_ai.backend.store.model_store import ModelStore

    return InferenceEngine(ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")).get(TINY_TEXT)


@pytest.fixture(autouse=True)
def env_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.delenv("SYNTH_AI_RL_PREFETCH", raising=False)
    return ENV_KEY


@pytest.fixture
def any_update_is_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop prefetches only after an update shorter than PREFETCH_MAX_UPDATE_S; on a loaded CI machine the
    tiny model's update may take longer, and these tests are about what a prefetch does, not when it is chosen
    (test_the_prefetch_gate covers that)."""
    from synth_ai.backend.trainers.rl import prefetch

    monkeypatch.setattr(prefetch, "PREFETCH_MAX_UPDATE_S", 1e6)


def _wait(predicate: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


# --- the batcher, driven through its Runner seam --------------------------------------------------------------


class _Batch(list):
    def __init__(self, loaded: Any) -> None:
        super().__init__()
        self.loaded = loaded


class StepRunner:
    """A Runner whose jobs end after `params["steps"]` decoding steps; steps wait for `go` (set by the test)."""

    def __init__(self) -> None:
        self.admitted: list[list[Any]] = []
        self.go = threading.Event()
        self.go.set()

    def admit(self, batch: Any, jobs: list[Any]) -> tuple[Any, list[Any]]:
        self.admitted.append(list(jobs))
        batch = batch if batch is not None else _Batch(jobs[0].loaded)
        for job in jobs:
            job.rows_left = job.params["steps"]
            batch.append(job)
        return batch, []

    def step(self, batch: Any) -> list[Any]:
        self.go.wait()
        done = []
        for job in list(batch):
            job.rows_left -= 1
            if job.rows_left == 0:
                job.result = "done"
                batch.remove(job)
                done.append(job)
        return done

    def run_alone(self, job: Any) -> None:
        raise AssertionError("text jobs are batched")

    def abandon(self, batch: Any) -> list[Any]:
        return list(batch)


LOADED = SimpleNamespace(vision=False)


def _job(steps: int = 1) -> Any:
    from synth_ai.backend.inference.batching import Job

    return Job(loaded=LOADED, params={"n": 1, "steps": steps}, messages=[], images=[], record=False)


def _submit(batcher: Any, job: Any) -> threading.Thread:
    thread = threading.Thread(target=batcher.submit, args=(job,), daemon=True)
    thread.start()
    return thread


def test_held_jobs_wait_then_start_as_one_batch() -> None:
    from synth_ai.backend.inference.batching import Batcher

    runner = StepRunner()
    batcher = Batcher(runner, window_s=0.01)
    batcher.hold()
    jobs = [_job() for _ in range(3)]
    threads = [_submit(batcher, job) for job in jobs]
    _wait(lambda: len(batcher._waiting) == 3, "the jobs to queue")  # noqa: SLF001 - the queue is what is held
    time.sleep(0.3)  # many windows: unheld, the first job would have started by now
    assert runner.admitted == [] and batcher.batches == 0 and not any(j.done.is_set() for j in jobs)

    batcher.release()
    for thread in threads:
        thread.join(10)
    assert all(j.result == "done" for j in jobs)
    assert batcher.batches == 1 and batcher.rows == 3  # one prefill for all of them
    assert len(runner.admitted) == 1 and set(map(id, runner.admitted[0])) == set(map(id, jobs))


def test_a_hold_lets_the_running_batch_finish_but_nothing_joins_it() -> None:
    from synth_ai.backend.inference.batching import Batcher

    runner = StepRunner()
    runner.go.clear()
    batcher = Batcher(runner, window_s=0.0)
    running = _job(steps=3)
    first = _submit(batcher, running)
    _wait(lambda: len(runner.admitted) == 1, "the first job to start")
    batcher.hold()
    late = _job(steps=1)
    second = _submit(batcher, late)
    _wait(lambda: len(batcher._waiting) == 1, "the late job to queue")  # noqa: SLF001
    runner.go.set()  # the running batch decodes on: unheld, the late job would join it between two steps
    first.join(10)
    assert running.result == "done"
    time.sleep(0.3)
    assert not late.done.is_set() and batcher.batches == 1 and batcher.joined == 0

    batcher.release()
    second.join(10)
    assert late.result == "done" and batcher.batches == 2 and batcher.joined == 0 and batcher.rows == 2
    assert [len(jobs) for jobs in runner.admitted] == [1, 1]


def test_a_held_policy_server_queues_calls_and_samples_them_in_one_prefill(loaded_tiny: Any) -> None:
    import httpx

    from synth_ai.backend.inference.policy_server import LocalPolicyServer

    server = LocalPolicyServer(loaded_tiny, seed=3)
    url = server.start()
    batcher = server.engine.batcher
    answers: dict[str, Any] = {}

    def call(cid: str) -> None:
        body = {"model": TINY_TEXT, "messages": [{"role": "user", "content": f"Say a color ({cid})"}],
                "temperature": 1.0, "max_tokens": 4}
        answers[cid] = httpx.post(f"{url}?cid={cid}", json=body, timeout=120)

    try:
        server.hold()
        cids = [f"it0-s{i}-g0" for i in range(3)]
        threads = [threading.Thread(target=call, args=(cid,), daemon=True) for cid in cids]
        for thread in threads:
            thread.start()
        _wait(lambda: len(batcher._waiting) == 3, "the calls to queue")  # noqa: SLF001
        time.sleep(0.3)
        assert batcher.batches == 0 and batcher.steps == 0 and not answers
        server.release()
        for thread in threads:
            thread.join(120)
        assert [answers[cid].status_code for cid in cids] == [200, 200, 200]
        assert batcher.batches == 1 and batcher.rows == 3
        assert all(len(server.take_calls(cid)) == 1 for cid in cids)
    finally:
        server.release()
        server.stop()


# --- when the loop may prefetch -------------------------------------------------------------------------------


def test_the_prefetch_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    from synth_ai.backend.trainers.rl.prefetch import FIRST_UPDATE_FACTOR, PREFETCH_MAX_UPDATE_S, prefetch_allowed

    holdable = SimpleNamespace(hold=lambda: None, release=lambda: None)

    def allowed(*, engine: Any = holdable, next_iteration: int = 3, last_update_s: float | None = 1.0,
                rollouts_s: float | None = None, **settings: Any) -> bool:
        settings = {"iterations": 10, "eval_every": 0, "rollout_timeout_s": 300.0, **settings}
        return prefetch_allowed(SimpleNamespace(**settings), engine, next_iteration=next_iteration,
                                last_update_s=last_update_s, rollouts_s=rollouts_s)

    assert allowed()
    assert not allowed(last_update_s=None)  # no update measured yet, and nothing to estimate it from
    # before the first update, the rollouts just run stand in for it, with a margin
    assert allowed(last_update_s=None, rollouts_s=0.1, next_iteration=1)
    assert not allowed(last_update_s=None, rollouts_s=PREFETCH_MAX_UPDATE_S / FIRST_UPDATE_FACTOR + 0.1)
    assert not allowed(last_update_s=None, rollouts_s=1.0, rollout_timeout_s=30.0)
    assert allowed(last_update_s=1.0, rollouts_s=60.0)  # a measured update wins over the estimate
    assert not allowed(last_update_s=PREFETCH_MAX_UPDATE_S + 0.1)  # held task apps would wait that long
    assert not allowed(rollout_timeout_s=5.0)  # nor longer than a tenth of their rollout timeout
    assert not allowed(next_iteration=10)  # no such iteration
    assert not allowed(eval_every=3) and allowed(eval_every=3, next_iteration=4)  # the evaluation comes first
    monkeypatch.setenv("SYNTH_AI_RL_PREFETCH", "0")
    assert not allowed()


# --- the loop, on fakes ---------------------------------------------------------------------------------------


class Arrivals:
    """The run ids of the `/rollout` requests the task app got (`quiz_app(arrived=...)`), to wait on."""

    def __init__(self) -> None:
        self.run_ids: list[str] = []
        self._changed = threading.Condition()

    def __call__(self, run_id: str) -> None:
        with self._changed:
            self.run_ids.append(run_id)
            self._changed.notify_all()

    def wait_for(self, fragment: str) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: any(fragment in r for r in self.run_ids), timeout=WAIT_S), \
                f"no /rollout for {fragment!r} reached the task app"


def overlapping(arrivals: Arrivals) -> FakeRL:
    """Fakes whose k-th update, while a prefetch holds the engine, lasts until iteration k+1's first rollout has
    reached the task app (a real update outlasts that; the fake's would not)."""
    fakes = FakeRL()

    def during_update(k: int) -> None:
        if fakes.engines[-1].held:
            arrivals.wait_for(f"-it{k + 1}-")

    fakes.during_update = during_update
    return fakes


def _overlapped(recorder: Recorder) -> dict[int, float]:
    return {s["data"]["iteration"]: s["data"]["rollouts_overlapped_s"] for s in recorder.of("rl.train.step")}


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == PREFETCH_THREAD and t.is_alive()]


def test_prefetched_rollouts_give_the_same_samples_as_sequential_ones(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      any_update_is_short: None) -> None:
    runs = {}
    for name, switch in (("off", "0"), ("on", None)):
        if switch is None:
            monkeypatch.delenv("SYNTH_AI_RL_PREFETCH", raising=False)
        else:
            monkeypatch.setenv("SYNTH_AI_RL_PREFETCH", switch)
        seen: list[tuple[str, int]] = []
        recorder = Recorder()
        arrivals = Arrivals()
        with running_app(quiz_app(seen=seen, arrived=arrivals)) as app:
            run_in_process(tmp_path / name, None, app, recorder, iterations_per_epoch=3, seed=5,
                           parts=overlapping(arrivals).parts())
        runs[name] = (recorder, seen)
    off, on = runs["off"][0], runs["on"][0]

    assert _overlapped(off) == {0: 0.0, 1: 0.0, 2: 0.0}
    overlapped = _overlapped(on)
    # iteration 1's rollouts go out during iteration 0's update (estimated from iteration 0's rollouts), and so on
    assert overlapped[0] == 0.0 and overlapped[1] > 0 and overlapped[2] > 0
    for name in ("reward.mean", "reward.std", "response_tokens.mean", "rollouts.errors"):
        assert on.series(name) == off.series(name), name
    # recorded log-probs come from batched rows: float rounding may differ with the batch a call lands in
    assert on.series("loss") == pytest.approx(off.series("loss"), rel=1e-4, abs=1e-6)
    assert len(on.series("loss")) == 3
    # each (mode, seed) was asked for exactly as often: nothing sent twice, nothing extra
    assert collections.Counter(runs["on"][1]) == collections.Counter(runs["off"][1])
    assert not _prefetch_threads()


def test_no_prefetch_across_a_due_evaluation(tmp_path: Path, any_update_is_short: None) -> None:
    seen: list[tuple[str, int]] = []
    recorder = Recorder()
    evaluation = {"instances": 2, "every_n_iters": 3, "seeds": "10-11"}
    arrivals = Arrivals()
    with running_app(quiz_app(seen=seen, arrived=arrivals)) as app:
        run_in_process(tmp_path, None, app, recorder, iterations_per_epoch=4, seed=5,
                       tables={"evaluation": evaluation}, parts=overlapping(arrivals).parts())
    # evaluations at iterations 0 and 3 and after the last; iterations 1's and 2's rollouts were sent during the
    # update before them, iteration 3's only after its evaluation
    overlapped = _overlapped(recorder)
    assert sorted(overlapped) == [0, 1, 2, 3]
    assert overlapped[0] == overlapped[3] == 0.0 and overlapped[1] > 0 and overlapped[2] > 0
    evals = [i for i, (mode, _seed) in enumerate(seen) if mode == "eval"]
    assert len(evals) == 6
    iteration_3 = [i for i, (mode, seed) in enumerate(seen) if mode == "rl" and seed in (6, 7)]
    assert len(iteration_3) == 8 and min(iteration_3) > evals[3] and max(iteration_3) < evals[4]


@pytest.mark.parametrize("how", ["stop", "error"])
def test_leaving_while_a_prefetch_is_in_flight_cancels_it(tmp_path: Path, how: str,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          any_update_is_short: None) -> None:
    """Iteration 2's rollouts (seeds 4 and 5) are sent during iteration 1's update and the task app takes longer
    with them than the loop waits for a cancelled prefetch; the loop leaves right after iteration 1's step (a stop
    asked for, or the reporter failing: then only `abandon()` can end the prefetch, should_stop stays False)."""
    from synth_ai.backend.trainers.rl import prefetch
    from synth_ai.backend.trainers.sft.trainer import TrainingCancelled

    monkeypatch.setattr(prefetch, "JOIN_TIMEOUT_S", 2.0)  # below the delay: a prefetch not cancelled outlives it
    stop = threading.Event()

    def on_event(kind: str) -> None:
        if kind == "rl.train.step" and len(recorder.of("rl.train.step")) == 2:
            if how == "stop":
                stop.set()
            else:
                raise RuntimeError("the reporter lost its database")

    recorder = Recorder(on_event=on_event)
    arrivals = Arrivals()
    with running_app(quiz_app(delay=lambda seed: 4.0 if seed >= 4 else 0.0, arrived=arrivals)) as app:
        with pytest.raises(TrainingCancelled if how == "stop" else RuntimeError):
            run_in_process(tmp_path, None, app, recorder, should_stop=stop.is_set, iterations_per_epoch=4, seed=5,
                           parts=overlapping(arrivals).parts())
        assert not _prefetch_threads()
        policy = urlsplit(recorder.of("rl.train.started")[0]["data"]["policy_url"])
        with pytest.raises(OSError):  # no new connection
            socket.create_connection((policy.hostname, policy.port), timeout=5).close()
    steps = recorder.of("rl.train.step")
    assert [s["data"]["iteration"] for s in steps] == [0, 1] and steps[1]["data"]["rollouts_overlapped_s"] > 0
    if how == "stop":
        stopped = recorder.of("rl.train.stopped")
        assert len(stopped) == 1 and stopped[0]["data"]["iteration"] == 2
        assert "rollouts in flight were cancelled" in stopped[0]["message"]
    else:
        assert not recorder.of("rl.train.stopped")
    assert not recorder.of("rl.train.completed")


def test_a_stopped_policy_server_answers_no_call_on_a_kept_alive_connection(loaded_tiny: Any) -> None:
    import http.client
    import json

    from synth_ai.backend.inference.policy_server import LocalPolicyServer

    server = LocalPolicyServer(loaded_tiny, seed=3)
    url = urlsplit(server.start())
    body = json.dumps({"model": TINY_TEXT, "messages": [{"role": "user", "content": "A color?"}], "max_tokens": 2})

    def call(connection: http.client.HTTPConnection, cid: str) -> int | None:
        try:
            connection.request("POST", f"{url.path}?cid={cid}", body, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
            return answer.status
        except (OSError, http.client.HTTPException):
            return None

    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        assert call(connection, "before") == 200
        server.stop()
        assert call(connection, "after") != 200  # a task app's episode still running when the job left
    finally:
        connection.close()
        server.stop()


def test_failed_prefetched_rollouts_are_reported_like_any_others(tmp_path: Path,
                                                                 any_update_is_short: None) -> None:
    """Iteration 2 (prefetched) loses seed 4's group to HTTP 500s, iteration 3 loses every rollout: both are
    reported and counted as usual (retried once), and the job goes on."""
    def fail(run_id: str) -> bool:
        return "-it2-s4-" in run_id or "-it3-" in run_id

    recorder = Recorder()
    arrivals = Arrivals()
    with running_app(quiz_app(fail=fail, arrived=arrivals)) as app:
        result = run_in_process(tmp_path, None, app, recorder, iterations_per_epoch=4, seed=5,
                                parts=overlapping(arrivals).parts())
    assert result["fine_tuned_model"] == f"rl:{TINY_TEXT}:rljob_local"
    failures = {f["data"]["iteration"]: f["data"] for f in recorder.of("rl.rollouts.failed")}
    assert sorted(failures) == [2, 3]
    assert failures[2]["failed"] == 4 and failures[2]["total"] == 8 and failures[2]["by_kind"] == {"http": 4}
    assert failures[3]["failed"] == 8 and failures[3]["by_kind"] == {"http": 8}
    assert failures[2]["attempts"] == 2 and failures[3]["attempts"] == 2  # retried once, as usual
    steps = {s["data"]["iteration"]: s["data"] for s in recorder.of("rl.train.step")}
    assert sorted(steps) == [0, 1, 2]  # iteration 3 had nothing to train on
    assert steps[2]["rollouts_overlapped_s"] > 0 and steps[2]["errors"] == 4
    assert [v for n, step, v in recorder.metrics if n == "rollouts.errors"] == [0, 0, 4, 8]
    assert recorder.of("rl.train.completed")
    assert not _prefetch_threads()
