"""A key's type and bounds are written once, in the config models (`synth_ai.config`): `config validate`, the
backend's 400 (a real backend over HTTP) and the trainer's settings resolution refuse the same value with the same
words. `[training].weight_decay` is an RL key the trainer honours that joined the config model; `warmup_ratio` and
`parallelism.deepspeed_stage` are SFT keys whose bounds used to be written in each of the three places."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from backend_support import BackendProcess

from synth_ai.backend.trainers.rl.rl_settings import resolve_rl_settings
from synth_ai.backend.trainers.sft.sft_settings import resolve_settings
from synth_ai.config.common import ResolveContext
from synth_ai.config.loader import load_config
from synth_ai.errors import ConfigError, InvalidInputError

BASE = Path(__file__).parent / "data" / "broken_configs"
RL_URL = "http://127.0.0.1:9"

CASES = [
    # (kind, TOML edit, key path, bad value, what the config type expects)
    ("rl", ("[training]\n", "[training]\nweight_decay = -0.5\n"), ("training", "weight_decay"), -0.5, "a number >= 0"),
    ("sft", ("warmup_ratio = 0.05", "warmup_ratio = 2"), ("hyperparameters", "warmup_ratio"), 2,
     "a number between 0 and 1"),
    ("sft", ("deepspeed_stage = 2", "deepspeed_stage = 7"),
     ("hyperparameters", "parallelism", "deepspeed_stage"), 7, "0, 1, 2 or 3"),
]


@pytest.fixture
def backend(shared_backend: BackendProcess) -> BackendProcess:
    """The worker's shared backend: these tests only post bodies it refuses."""
    return shared_backend


def _nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    for key in reversed(path):
        value = {key: value}
    return value


def _config_validate(kind: str, edit: tuple[str, str], tmp_path: Path) -> dict[str, str]:
    text = (BASE / f"{kind}_base.toml").read_text()
    assert text.count(edit[0]) == 1
    path = tmp_path / f"{kind}.toml"
    path.write_text(text.replace(edit[0], edit[1], 1))
    (Path.cwd() / "train.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}, '
                                            '{"role": "assistant", "content": "hello"}]}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, kind, ResolveContext(environ={}))
    return {i.key: i.message for i in info.value.issues if i.severity == "error"}


def _bodies(kind: str, path: tuple[str, ...], value: Any) -> tuple[str, dict[str, Any], dict[str, Any], str]:
    """(route, create body, the trainer's spec, the key as the backend and the trainer name it)."""
    if kind == "rl":
        data = {"endpoint_base_url": RL_URL, "base_model": "Qwen/Qwen3-4B", "config": _nested(path, value)}
        body = {"job_type": "rl", "data": data}
        return "/rl/jobs", body, {"job_id": "x", **body}, f"[{'.'.join(path[:-1])}].{path[-1]}"
    hyper = {"n_epochs": 1, **_nested(path[1:], value)}
    body = {"model": "synth-ai/tiny-qwen3", "hyperparameters": hyper, "training_file_id": "file_unused"}
    return "/learning/jobs", body, {"job_id": "x", **body}, ".".join(path)


@pytest.mark.parametrize(("kind", "edit", "path", "value", "expects"), CASES, ids=[".".join(c[2]) for c in CASES])
def test_one_rule_refuses_the_value_everywhere(kind, edit, path, value, expects, backend, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    issues = _config_validate(kind, edit, tmp_path)
    toml_key = f"[{'.'.join(path[:-1])}].{path[-1]}"
    assert issues.get(toml_key) == f"expected {expects}", issues

    route, body, spec, name = _bodies(kind, path, value)
    said = f"{name} must be {expects} (found {value!r})."
    with backend.client() as api:
        response = api.post(route, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_job" and response.json()["detail"] == said
    assert error["details"]["field"].endswith(".".join(path))

    with pytest.raises(InvalidInputError) as refused:
        (resolve_rl_settings if kind == "rl" else resolve_settings)(spec)
    assert refused.value.message == said


def test_a_key_the_model_knows_reaches_the_trainer():
    """The value the config type made of it is what the trainer uses (a numeric string becomes the number)."""
    spec = {"job_id": "x", "data": {"endpoint_base_url": RL_URL, "base_model": "Qwen/Qwen3-4B",
                                    "config": {"training": {"weight_decay": "0.25", "batch_size": "3"}}}}
    settings = resolve_rl_settings(spec)
    assert (settings.weight_decay, settings.batch_size) == (0.25, 3)
