"""The RL loop's parts (`backend/trainers/rl/run_parts.py`): `GSPOTrainer` and the tests' `fake_rl.FakeTrainer`
have every member the `Trainer` protocol names (methods with its signatures); the loop and its reports reach a
trainer through those members only; a job's default parts are the GSPO trainer and the chosen engine; and a loop
given fakes runs through `run_rl` with no model (what the control-flow tests build on)."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path
from typing import Any

import pytest
from fake_rl import FakeRL, FakeTrainer
from protocol_support import RL_LOOP, data_members, methods
from rl_support import Recorder, quiz_app, run_in_process
from taskapp_support import running_app

from synth_ai.backend.trainers.rl.run_parts import Trainer, default_parts

ENV_KEY = "sk_env_rl_parts_0123456789"


def _data_members() -> dict[str, Any]:
    return data_members(Trainer)


def _methods() -> list[str]:
    return methods(Trainer)


def _set_in_init(cls: type) -> set[str]:
    """The attributes `cls.__init__` assigns on `self` (the GSPO trainer sets its members there)."""
    tree = ast.parse(inspect.getsource(cls))
    init = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    names: set[str] = set()
    for node in ast.walk(init):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        for target in targets:
            for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self":
                    names.add(part.attr)
    return names


def _trainers() -> list[type]:
    from synth_ai.backend.trainers.rl.step import GSPOTrainer

    return [GSPOTrainer, FakeTrainer]


def test_the_protocol_names_what_the_loop_needs() -> None:
    assert {"version", "root_base", "adjustment", "tokenizer", "where", "dtype_name", "trainable_count", "vision",
            "served", "train", "checkpoint", "resume", "save_final"} <= set(_data_members()) | set(_methods())


@pytest.mark.parametrize("trainer_class", _trainers(), ids=lambda c: c.__name__)
def test_each_trainer_has_every_member_with_its_signature(trainer_class: type) -> None:
    declared = set(typing.get_type_hints(trainer_class)) | _set_in_init(trainer_class)
    assert set(_data_members()) - declared == set(), f"{trainer_class.__name__} lacks these members"
    for name in _methods():
        found = inspect.getattr_static(trainer_class, name, None)
        assert found is not None, f"{trainer_class.__name__} lacks {name}"
        want = [(p.name, p.kind) for p in inspect.signature(getattr(Trainer, name)).parameters.values()]
        have = [(p.name, p.kind) for p in inspect.signature(found).parameters.values()]
        assert have == want, f"{trainer_class.__name__}.{name}{inspect.signature(found)}"


def test_the_loop_reaches_a_trainer_only_through_the_protocol() -> None:
    members = set(_data_members()) | set(_methods())
    outside: list[str] = []
    for path in (RL_LOOP / "loop.py", RL_LOOP / "iteration_report.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            named_trainer = isinstance(node, ast.Attribute) and (
                (isinstance(node.value, ast.Name) and node.value.id == "trainer")
                or (isinstance(node.value, ast.Attribute) and node.value.attr == "trainer"))
            if named_trainer and node.attr not in members:
                outside.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert outside == []


def test_a_jobs_default_parts_are_the_gspo_trainer_and_the_chosen_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from synth_ai.backend.trainers.rl import engine_choice, step

    made: list[tuple[str, tuple]] = []
    monkeypatch.setattr(step, "GSPOTrainer", lambda *args: made.append(("trainer", args)) or "trainer")
    monkeypatch.setattr(engine_choice, "build_rollout_engine",
                        lambda *args, ranks: made.append(("engine", (*args, ranks))) or "engine")
    parts = default_parts()
    assert parts.make_trainer("settings", "store", Path("work")) == "trainer"
    assert parts.make_engine("settings", "trainer", "spec", "reporter", 2) == "engine"
    assert made == [("trainer", ("settings", "store", Path("work"))),
                    ("engine", ("settings", "trainer", "spec", "reporter", 2))]


def test_a_loop_on_fakes_trains_every_iteration_and_publishes_nothing_synchronously(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    fakes = FakeRL()
    recorder = Recorder()
    with running_app(quiz_app()) as app:
        result = run_in_process(tmp_path, None, app, recorder, iterations_per_epoch=2, parts=fakes.parts())
    trainer, engine = fakes.trainers[0], fakes.engines[0]
    assert isinstance(trainer, Trainer)
    assert result["fine_tuned_model"] == f"rl:{trainer.root_base}:rljob_local" and result["iterations"] == 2
    assert trainer.updates == 2 and trainer.version == 2  # one optimiser step per iteration by default
    assert engine.published == [] and engine.syncs == 2  # synchronous: a weight sync after each iteration
    assert [len(samples) for samples in trainer.trained] == [s["data"]["samples"]
                                                            for s in recorder.of("rl.train.step")]
    assert engine.requests == 16 and dict(engine._calls) == {}  # noqa: SLF001 - every call taken by its rollout
