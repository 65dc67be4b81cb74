"""The rollout engine contract (`backend/inference/rollout_engine.py`): both engines, and the tests' fake
(`fake_rl.FakeRolloutEngine`), have every member the protocol names, with its signature and type; the RL loop
reaches an engine through those members only, never by probing (`getattr`/`hasattr`); and, on the built-in engine
and the fake alike, `hold()` is a context manager that holds the engine until its block ends, `take_calls` settles
a cid (later calls are answered, not kept) and `publish(v)` tags the tokens sampled after it with `v`."""

from __future__ import annotations

import ast
import inspect
import threading
import typing
from typing import Any

import pytest
from protocol_support import RL_LOOP, data_members, methods

from synth_ai.backend.inference.rollout_engine import RolloutEngine

TINY_TEXT = "synth-ai/tiny-qwen3"


def _data_members() -> dict[str, Any]:
    return data_members(RolloutEngine)


def _callable_members() -> list[str]:
    return methods(RolloutEngine)


def protocol_members() -> set[str]:
    return set(_data_members()) | set(_callable_members())


def _implementations() -> list[type]:
    from fake_rl import FakeRolloutEngine

    from synth_ai.backend.inference.policy_server import BuiltinRolloutEngine
    from synth_ai.backend.inference.split_engine import SplitRolloutEngine

    engines: list[type] = [BuiltinRolloutEngine, FakeRolloutEngine, SplitRolloutEngine]
    try:
        from synth_ai.backend.inference.vllm_engine import VllmRolloutEngine
    except Exception:  # noqa: BLE001 - no vllm here: its class cannot be imported, the built-in one is still checked
        return engines
    return engines + [VllmRolloutEngine]


def test_the_protocol_names_what_the_rl_loop_needs() -> None:
    assert {"start", "close", "sync_weights", "publish", "take_calls", "hold", "release", "failure", "version",
            "adapter_versions", "images_dropped", "bind_host", "path_token"} <= protocol_members()


@pytest.mark.parametrize("engine_class", _implementations(), ids=lambda c: c.__name__)
def test_each_engine_implements_every_member_with_its_signature(engine_class: type) -> None:
    hints = typing.get_type_hints(engine_class)
    for name, wanted in _data_members().items():
        assert name in hints, f"{engine_class.__name__} does not declare {name}"
        assert hints[name] == wanted, f"{engine_class.__name__}.{name}: {hints[name]} is not {wanted}"
    for name in _callable_members():
        declared = inspect.getattr_static(RolloutEngine, name)
        found = inspect.getattr_static(engine_class, name, None)
        assert found is not None, f"{engine_class.__name__} lacks {name}"
        if isinstance(declared, property):
            assert isinstance(found, property), f"{engine_class.__name__}.{name} must be a property"
            continue
        want = [(p.name, p.kind) for p in inspect.signature(declared).parameters.values()]
        have = [(p.name, p.kind) for p in inspect.signature(found).parameters.values()]
        assert have == want, f"{engine_class.__name__}.{name}{inspect.signature(found)} is not {name}" \
                             f"{inspect.signature(declared)}"


def _engine_expression(node: ast.AST) -> bool:
    """`engine` or `<anything>.engine`: how the RL loop names its rollout engine."""
    return (isinstance(node, ast.Name) and node.id == "engine") or (
        isinstance(node, ast.Attribute) and node.attr == "engine")


def test_the_rl_loop_reaches_an_engine_only_through_the_protocol() -> None:
    members = protocol_members()
    outside: list[str] = []
    for path in sorted(RL_LOOP.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and _engine_expression(node.value) and node.attr not in members:
                outside.append(f"{where} .{node.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("getattr", "hasattr") and node.args and _engine_expression(node.args[0]):
                outside.append(f"{where} {node.func.id}()")
    assert outside == []


@pytest.fixture(scope="module")
def builtin_engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("torch")
    from synth_ai.backend.inference.engine import InferenceEngine
    from synth_ai.backend.inference.policy_server import BuiltinRolloutEngine
    from synth_ai.backend.store.model_store import ModelStore

    store = ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")
    engine = BuiltinRolloutEngine(InferenceEngine(store).get(TINY_TEXT), seed=3)
    yield engine
    engine.close()


@pytest.fixture
def fake_engine() -> Any:
    from fake_rl import FakeRolloutEngine

    engine = FakeRolloutEngine()
    yield engine
    engine.close()


def _queued(engine: Any) -> int:
    """Calls the engine holds: the built-in engine's batcher queue, the fake's count."""
    return len(engine.engine.batcher._waiting) if hasattr(engine, "engine") else engine.queued  # noqa: SLF001


def _batches(engine: Any) -> int:
    """Batches sampled (the fake samples each call alone: its answers)."""
    return engine.engine.batcher.batches if hasattr(engine, "engine") else engine.answered


@pytest.fixture(params=["builtin", "fake"])
def any_engine(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_engine")


def _call(url: str, cid: str) -> None:
    import httpx

    body = {"model": TINY_TEXT, "messages": [{"role": "user", "content": "Say a color"}], "max_tokens": 3}
    httpx.post(f"{url}?cid={cid}", json=body, timeout=120).raise_for_status()


def test_an_engine_is_a_rollout_engine_and_hold_holds_until_its_block_ends(any_engine: Any) -> None:
    assert isinstance(any_engine, RolloutEngine)
    assert any_engine.failure is None and any_engine.adapter_versions is None
    url = any_engine.start()
    answered = threading.Event()
    before = _batches(any_engine)

    def call() -> None:
        _call(url, "held-0")
        answered.set()

    with any_engine.hold() as held:
        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        while _queued(any_engine) < 1:  # the call is queued, not sampled
            assert thread.is_alive()
            threading.Event().wait(0.01)
        assert not answered.is_set() and _batches(any_engine) == before
    held.__exit__(None, None, None)  # releasing again is harmless
    thread.join(120)
    assert answered.is_set() and _batches(any_engine) == before + 1
    assert len(any_engine.take_calls("held-0")) == 1


def test_taken_cids_are_settled_and_publish_tags_what_is_sampled_after_it(any_engine: Any) -> None:
    url = any_engine.start()
    _call(url, "settle-0")
    first = any_engine.take_calls("settle-0")
    assert [c.index for c in first] == [0] and first[0].samples
    assert all(v == any_engine.version for s in first[0].samples for v in s.versions)
    _call(url, "settle-0")  # a late call of a settled cid: answered, not kept
    assert any_engine.take_calls("settle-0") == []

    version = any_engine.version + 3
    any_engine.publish(version)
    assert any_engine.version == version
    _call(url, "tagged-0")
    _call(url, "tagged-0")
    calls = any_engine.take_calls("tagged-0")
    assert [c.index for c in calls] == [0, 1]
    assert {v for c in calls for s in c.samples for v in s.versions} == {version}
