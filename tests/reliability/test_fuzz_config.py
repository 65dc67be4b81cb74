"""Fuzzing the TOML config loader (`synth_ai.config.loader.load_config`) with hypothesis.

Properties:
- any bytes, any TOML-ish text, and any edit of a bundled example config (a value replaced by an arbitrary
  TOML value, a key removed, an unknown key added) either loads or raises a `SynthError`; a `ConfigError` names
  the file and, for every issue, a key path or a line;
- through the CLI (`config validate --json`) the same inputs give exactly one JSON document, a documented exit
  code and no traceback;
- a valid config round-trips: rewritten with its keys in another order, it resolves to the same settings.

The CI budget is fixed and derandomized (the same examples every run); `pytest -m soak` runs a larger random one.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth_ai.config.common import ResolveContext
from synth_ai.config.loader import load_config
from synth_ai.errors import ConfigError, ExitCode, SynthError

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {p.name: tomllib.loads(p.read_text()) for p in sorted((REPO / "examples" / "configs").glob("*.toml"))}
KINDS = (None, "rl", "sft", "eval", "filter")

CI = settings(max_examples=120, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SOAK = settings(max_examples=4000, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# --- a small TOML writer (dict -> text) so edited configs can be written back ----------------------------------

def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(type(value))


def toml_dumps(data: dict[str, Any]) -> str:
    lines: list[str] = []

    def table(prefix: tuple[str, ...], section: dict[str, Any]) -> None:
        scalars = [(k, v) for k, v in section.items() if not isinstance(v, dict)]
        tables = [(k, v) for k, v in section.items() if isinstance(v, dict)]
        if prefix and (scalars or not tables):
            lines.append("[" + ".".join(json.dumps(p) for p in prefix) + "]")
        lines.extend(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in scalars)
        for key, sub in tables:
            table(prefix + (key,), sub)

    table((), data)
    return "\n".join(lines) + "\n"


# --- strategies ------------------------------------------------------------------------------------------------

SNIPPETS = ["[algorithm]\n", 'type = "offline"\n', 'type = "online"\n', "[job]\n", "model = 1\n", "[filter]\n",
            'db = ""\n', "a.b = 1\n", "[[x]]\n", "'k' = {a: 1}\n", "= \n", "[hyperparameters]\n", "n_epochs = nan\n",
            "learning_rate = inf\n", "x = 1979-05-27\n", "[training]\n", "mode = []\n", "[eval]\n",
            'seeds = [1, "a"]\n', 'output = "x.jsonl"\n', "min_created_at = 99999999999999999\n", '"\\u0000" = 1\n',
            "[algorithm]\n[algorithm]\n", 'data = "../../../../etc/passwd"\n', "k = '''\n"]
RAW_INPUTS = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.lists(st.sampled_from(SNIPPETS), max_size=14).map(lambda parts: "".join(parts).encode()),
)
SCALARS = st.one_of(
    st.booleans(), st.integers(), st.integers(-3, 3), st.floats(), st.text(max_size=20), st.datetimes(), st.dates(),
    st.sampled_from(["", " ", "../../x", "/etc/passwd", "Qwen/Qwen3-4B", "synth-ai/tiny-qwen3", "lora", "fft",
                     "online", "offline", "sft", "gspo", "x.jsonl", "http://127.0.0.1:1", "${X}", "\x00", "1e309"]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)


def _key_paths(table: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for key, value in table.items():
        out.append(prefix + (key,))
        if isinstance(value, dict):
            out.extend(_key_paths(value, prefix + (key,)))
    return out


@st.composite
def edited_examples(draw: st.DrawFn) -> str:
    """A bundled example config with one to three random edits, as TOML text."""
    cfg = copy.deepcopy(EXAMPLES[draw(st.sampled_from(sorted(EXAMPLES)))])
    for _ in range(draw(st.integers(1, 3))):
        paths = _key_paths(cfg)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = cfg
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "remove":
            del parent[path[-1]]
        elif action == "replace":
            parent[path[-1]] = draw(VALUES)
        else:
            target = parent[path[-1]] if isinstance(parent[path[-1]], dict) else parent
            target[draw(st.text(min_size=1, max_size=10))] = draw(VALUES)
    return toml_dumps(cfg)


@pytest.fixture
def workdir(isolated_home: Path) -> Path:
    """The working directory with the example datasets where the example configs expect them."""
    shutil.copytree(REPO / "examples" / "datasets", isolated_home / "examples" / "datasets", dirs_exist_ok=True)
    return isolated_home


def assert_loads_or_typed_error(path: Path) -> None:
    for kind in KINDS:
        try:
            loaded = load_config(path, kind)
        except ConfigError as exc:
            assert exc.issues, exc.message
            for issue in exc.issues:
                assert issue.file, issue
                assert issue.key or issue.line, issue  # every problem is located
        except SynthError:
            pass  # typed, with its own message and exit code (unknown model, missing dataset, ...)
        else:
            json.dumps(loaded.resolved)  # what gets sent is JSON


# --- any input: loaded or a typed, located error ----------------------------------------------------------------

def _raw_input(workdir: Path, data: bytes) -> None:
    path = workdir / "fuzz.toml"
    path.write_bytes(data)
    assert_loads_or_typed_error(path)


def _edited(workdir: Path, text: str) -> None:
    path = workdir / "fuzz.toml"
    path.write_text(text)
    assert_loads_or_typed_error(path)


test_raw_input_never_crashes = CI(given(data=RAW_INPUTS)(_raw_input))
test_edited_example_never_crashes = CI(given(text=edited_examples())(_edited))
test_raw_input_never_crashes_soak = pytest.mark.soak(SOAK(given(data=RAW_INPUTS)(_raw_input)))
test_edited_example_never_crashes_soak = pytest.mark.soak(SOAK(given(text=edited_examples())(_edited)))


# --- through the CLI: one JSON document, a documented exit code, no traceback -----------------------------------

DOCUMENTED = {int(code) for code in ExitCode}


def _cli_validate(workdir: Path, text: str) -> None:
    from conftest import run_cli

    path = workdir / "fuzz.toml"
    path.write_text(text)
    result = run_cli("config", "validate", str(path), "--json")
    assert result.exit_code in DOCUMENTED - {int(ExitCode.INTERNAL)}, (result.exit_code, result.stdout,
                                                                       result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    json.loads(result.stdout)  # exactly one document


test_cli_validate_answers_in_json = settings(CI, max_examples=40)(
    given(text=st.one_of(edited_examples(), RAW_INPUTS.map(lambda b: b.decode("utf-8", "replace"))))(_cli_validate))


# --- valid configs round-trip -----------------------------------------------------------------------------------

def _shuffled(value: Any, rnd: Any) -> Any:
    if not isinstance(value, dict):
        return value
    keys = list(value)
    rnd.shuffle(keys)
    return {k: _shuffled(value[k], rnd) for k in keys}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@settings(CI, max_examples=8)
@given(rnd=st.randoms(use_true_random=False))
def test_example_round_trips_with_keys_reordered(workdir: Path, name: str, rnd: Any) -> None:
    original = workdir / name
    shutil.copyfile(REPO / "examples" / "configs" / name, original)
    rewritten = workdir / f"rewritten-{name}"
    rewritten.write_text(toml_dumps(_shuffled(EXAMPLES[name], rnd)))
    ctx = ResolveContext(allow_experimental=True)  # one example names an experimental model
    assert load_config(rewritten, ctx=ctx).resolved == load_config(original, ctx=ctx).resolved

