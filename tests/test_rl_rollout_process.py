"""The rollout runner in a child process (`trainers/rl/rollout_process.py`), with a real policy server over the tiny
model and the bundled color-quiz app over HTTP: the same rollouts as the runner in the trainer's process, retries
and their cids settled, a stop that reaches the child, a child that leaves with its trainer, a dead child that is a
clear error, and the switch that keeps the runner in process."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend_support import link_tiny, wait_for
from rl_support import quiz_app, rl_body
from taskapp_support import running_app

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

ENV_KEY = "sk_env_rl_rollout_process_0123"


@pytest.fixture(autouse=True)
def env_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    return ENV_KEY


@pytest.fixture
def trainer_for(tmp_path: Path, tiny_text_models: list[Path]) -> Any:
    """task URL -> (settings, trainer) of a small RL job against that app."""
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl.rl_settings import resolve_rl_settings
    from synth_ai.backend.trainers.rl.step import GSPOTrainer

    link_tiny(tmp_path / "store", tiny_text_models)

    def build(task_url: str) -> tuple[Any, Any]:
        settings = resolve_rl_settings({"job_id": "rljob_proc", **rl_body(task_url)})
        return settings, GSPOTrainer(settings, ModelStore(tmp_path / "store"), tmp_path / "work")

    return build


@pytest.fixture
def servers() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for thing in started:
        (thing.close if hasattr(thing, "close") else thing.stop)()


def policy_server(trainer: Any, prefix: str, servers: list[Any]) -> Any:
    from synth_ai.backend.inference.policy_server import LocalPolicyServer

    engine = LocalPolicyServer(trainer.served(), seed=3, cid_prefix=prefix)
    servers.append(engine)
    return engine


def child(settings: Any, engine: Any, servers: list[Any], should_stop: Any = lambda: False) -> Any:
    from synth_ai.backend.trainers.rl.rollout_process import RolloutProcess

    runner = RolloutProcess(settings, engine, ENV_KEY, should_stop)
    servers.insert(0, runner)  # closed before the engines stop
    return runner


def jobs(prefix: str) -> list[tuple[int, int, str]]:
    return [(seed, member, f"{prefix}it0-s{seed}-g{member}") for seed in (0, 1) for member in range(4)]


def test_the_child_runs_the_same_rollouts_as_the_trainer_process(trainer_for: Any, servers: list[Any]):
    from synth_ai.backend.trainers.rl.rollouts import RolloutRunner

    with running_app(quiz_app()) as app:
        settings, trainer = trainer_for(app)
        here = RolloutRunner(settings, policy_server(trainer, "a-", servers), ENV_KEY, lambda: False).run(
            jobs("a-"), mode="rl")
        there = child(settings, policy_server(trainer, "b-", servers), servers).run(jobs("b-"), mode="rl")
    assert all(r.ok for r in here + there), [r.error for r in here + there]
    # seeds derive from the cid less the job's prefix: both runs sample the same tokens and earn the same rewards
    assert [r.reward for r in there] == [r.reward for r in here]
    assert [[s.completion_ids for c in r.calls for s in c.samples] for r in there] == \
        [[s.completion_ids for c in r.calls for s in c.samples] for r in here]
    assert [r.attempt_cids for r in there] == [[cid] for _seed, _member, cid in jobs("b-")]
    assert all(len(r.calls) == 1 and r.calls[0].cid == r.cid for r in there)


def test_a_retried_rollout_keeps_the_calls_of_its_last_attempt(trainer_for: Any, servers: list[Any]):
    with running_app(quiz_app(fail=lambda run_id: run_id.endswith("s0-g0"))) as app:  # first attempt only
        settings, trainer = trainer_for(app)
        engine = policy_server(trainer, "c-", servers)
        rollouts = child(settings, engine, servers).run(jobs("c-"), mode="rl")
    retried = rollouts[0]
    assert retried.ok and retried.attempts == 2
    assert retried.attempt_cids == ["c-it0-s0-g0", "c-it0-s0-g0-r1"]
    assert [c.cid for c in retried.calls] == ["c-it0-s0-g0-r1"]
    assert engine.take_calls("c-it0-s0-g0") == []  # the failed attempt's cid was settled too


def test_a_stop_reaches_the_child_and_it_serves_the_next_run(trainer_for: Any, servers: list[Any]):
    from synth_ai.backend.trainers.rl.rollouts import RolloutsStopped

    stop = threading.Event()
    slow = {0: 5.0}  # seed 0's episodes take 5 s: a run that raises before then was stopped
    with running_app(quiz_app(delay=lambda seed: slow.get(seed, 0.0))) as app:
        settings, trainer = trainer_for(app)
        runner = child(settings, policy_server(trainer, "d-", servers), servers, stop.is_set)
        threading.Timer(0.5, stop.set).start()
        with pytest.raises(RolloutsStopped):
            runner.run(jobs("d-"), mode="rl")
        stop.clear()
        slow.clear()
        again = runner.run(jobs("e-"), mode="rl")
    assert all(r.ok for r in again), [r.error for r in again]


def test_the_child_leaves_with_its_trainer_ignores_its_signals_and_a_dead_child_is_a_clear_error(trainer_for: Any,
                                                                             servers: list[Any]):
    from synth_ai.backend.trainers.rl.rollout_process import PROCESS_ENV, RolloutProcessDied

    with running_app(quiz_app()) as app:
        settings, trainer = trainer_for(app)
        engine = policy_server(trainer, "f-", servers)
        orphan = child(settings, engine, servers)
        orphan._conn.close()  # what a killed trainer leaves: the pipe's other end closed, nothing said
        wait_for(lambda: orphan._process.poll() is not None, timeout=30, what="the orphaned child to leave")
        assert orphan._process.returncode == 0

        runner = child(settings, engine, servers)
        assert all(r.ok for r in runner.run(jobs("g-"), mode="rl"))
        runner._process.send_signal(signal.SIGTERM)  # what torchrun sends a rank's process group on a cancel
        assert all(r.ok for r in runner.run(jobs("i-"), mode="rl"))  # the trainer, not the signal, ends the child
        runner._process.kill()
        with pytest.raises(RolloutProcessDied, match=PROCESS_ENV):
            runner.run(jobs("j-"), mode="rl")


def test_the_switch_keeps_the_runner_in_the_trainer_process(trainer_for: Any, servers: list[Any],
                                                           monkeypatch: pytest.MonkeyPatch):
    from synth_ai.backend.trainers.rl.rollout_process import PROCESS_ENV, RolloutProcess, make_runner
    from synth_ai.backend.trainers.rl.rollouts import RolloutRunner

    with running_app(quiz_app()) as app:
        settings, trainer = trainer_for(app)
        engine = policy_server(trainer, "h-", servers)
        default = make_runner(settings, engine, ENV_KEY, lambda: False)
        servers.insert(0, default)
        assert isinstance(default, RolloutProcess)
        monkeypatch.setenv(PROCESS_ENV, "0")
        inside = make_runner(settings, engine, ENV_KEY, lambda: False)
        assert type(inside) is RolloutRunner
        assert all(r.ok for r in inside.run(jobs("h-"), mode="rl"))
