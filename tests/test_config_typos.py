"""Unknown keys: forwarded as-is (as synth-ai 0.2.17 does), with a "did you mean" warning when one looks like a
typo of a known key, at any depth of any config kind."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from synth_ai.config.common import ResolveContext
from synth_ai.config.loader import load_config
from synth_ai.train.request_bodies import build_rl_payload, build_sft_payload

DATA = Path(__file__).parent / "data" / "broken_configs"
BASE = {kind: (DATA / f"{kind}_base.toml").read_text() for kind in ("rl", "sft", "eval", "filter")}


def _replace(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _load(tmp_path: Path, kind: str, text: str):
    path = tmp_path / "work" / f"{kind}.toml"
    path.write_text(text)
    return load_config(path, kind, ResolveContext(environ={}))


@pytest.fixture(autouse=True)
def dataset(isolated_home: Path) -> None:
    (isolated_home / "train.jsonl").write_text('{"messages": []}\n')


TYPOS = [
    # kind, old snippet, new snippet, warned key path, suggestion, where the value lands in the resolved config
    ("rl", "[training]\n", "[trainig]\nnote = 1\n\n[training]\n", "trainig", "training", ("trainig",)),
    ("rl", "batch_size = 8", "batch_size = 8\nbatch_sise = 16", "[training].batch_sise", "batch_size",
     ("training", "batch_sise")),
    ("rl", "temperature = 0.7", "temperature = 0.7\ntemprature = 0.2", "[rollout.policy_config].temprature",
     "temperature", ("rollout", "policy_config", "temprature")),
    ("rl", "[evaluation]", "[training.weight_sync]\nenabel = true\n\n[evaluation]", "[training.weight_sync].enabel",
     "enable", ("training", "weight_sync", "enabel")),
    ("rl", "max_model_len = 4096", "max_model_len = 4096\ntensor_paralel_size = 1", "[vllm].tensor_paralel_size",
     "tensor_parallel_size", ("vllm", "tensor_paralel_size")),
    ("rl", 'gpu_type = "H100"', 'gpu_type = "H100"\ngpu_cout = 2', "[compute].gpu_cout", "gpu_count",
     ("compute", "gpu_cout")),
    ("sft", "learning_rate = 1e-5", "learning_rate = 1e-5\nwarmup_ration = 0.1", "[hyperparameters].warmup_ration",
     "warmup_ratio", ("hyperparameters", "warmup_ration")),
    ("sft", "bf16 = true", "bf16 = true\nactivation_checkpoint = true",
     "[hyperparameters.parallelism].activation_checkpoint", "activation_checkpointing",
     ("hyperparameters", "parallelism", "activation_checkpoint")),
    ("sft", 'data = "train.jsonl"', 'data = "train.jsonl"\npoll_second = 10', "[job].poll_second", "poll_seconds",
     ("job", "poll_second")),
    ("eval", "concurrency = 2", "concurrency = 2\nmax_llm_call = 3", "[eval].max_llm_call", "max_llm_calls",
     ("max_llm_call",)),
    ("eval", "max_tokens = 256", "max_tokens = 256\nthinking_budgt = 12", "[eval.policy_config].thinking_budgt",
     "thinking_budget", ("policy_config", "thinking_budgt")),
    ("filter", "limit = 100", "limit = 100\nmin_oficial_score = 0.2", "[filter].min_oficial_score",
     "min_official_score", ("filter", "min_oficial_score")),
]


def _dig(data: dict, path: tuple[str, ...]):
    for key in path:
        data = data[key]
    return data


@pytest.mark.parametrize("kind,old,new,key,suggestion,resolved_at", TYPOS, ids=[t[3] for t in TYPOS])
def test_typo_warns_with_did_you_mean_and_is_forwarded(kind, old, new, key, suggestion, resolved_at, tmp_path):
    text = _replace(BASE[kind], old, new)
    loaded = _load(tmp_path, kind, text)
    warnings = [w for w in loaded.warnings if w.key == key]
    assert len(warnings) == 1, [(w.key, w.message) for w in loaded.warnings]
    warning = warnings[0]
    assert f"did you mean `{suggestion}`?" in warning.message and "forwarded as-is" in warning.message
    typo = key.rsplit(".", 1)[-1].strip("[]")
    expected_line = next(n for n, line in enumerate(text.splitlines(), 1)
                         if line.startswith(typo) or line.startswith(f"[{typo}]"))
    assert warning.line == expected_line
    _dig(loaded.resolved, resolved_at)  # kept, not dropped


def test_keys_far_from_any_known_key_are_forwarded_silently(tmp_path: Path):
    text = BASE["rl"] + '\n[my_extras]\nowner = "team-a"\n\n[rollout.env_config]\ndifficulty = "hard"\n'
    text = _replace(text, "batch_size = 8", "batch_size = 8\ncustom_flag = true")
    loaded = _load(tmp_path, "rl", text)
    assert loaded.warnings == []
    assert loaded.resolved["my_extras"] == {"owner": "team-a"}
    assert loaded.resolved["training"]["custom_flag"] is True
    assert loaded.resolved["rollout"]["env_config"] == {"difficulty": "hard"}
    payload = build_rl_payload(loaded, api_base="http://backend.test/api")
    assert payload["data"]["config"]["my_extras"] == {"owner": "team-a"}
    assert payload["data"]["config"]["training"]["custom_flag"] is True


def test_typo_is_forwarded_into_the_rl_payload(tmp_path: Path):
    loaded = _load(tmp_path, "rl", _replace(BASE["rl"], "batch_size = 8", "batch_size = 8\nbatch_sise = 16"))
    payload = build_rl_payload(loaded, api_base="http://backend.test/api")
    assert payload["data"]["config"]["training"]["batch_sise"] == 16
    assert payload["data"]["config"]["training"]["batch_size"] == 8


def test_unknown_hyperparameter_is_forwarded_into_the_sft_payload(tmp_path: Path):
    text = _replace(BASE["sft"], "learning_rate = 1e-5", "learning_rate = 1e-5\nlr_scheduler = \"cosine\"")
    loaded = _load(tmp_path, "sft", text)
    assert loaded.warnings == []
    payload = build_sft_payload(loaded, training_file_id="file-1")
    assert payload["hyperparameters"]["lr_scheduler"] == "cosine"


def test_typo_of_a_required_key_is_an_error_and_a_hint(tmp_path: Path):
    """`lable` instead of `label`: the required key is missing (error) and the typo is named (warning)."""
    path = tmp_path / "work" / "rl.toml"
    path.write_text(_replace(BASE["rl"], 'label = "base-rl"', 'lable = "base-rl"'))
    result = run_cli("config", "validate", str(path))
    assert result.exit_code == 3
    assert "[model].label: required key is missing" in result.stdout
    assert "[model].lable: unknown key (forwarded as-is); did you mean `label`?" in result.stderr


def test_typo_warning_through_cli_json(tmp_path: Path):
    path = tmp_path / "work" / "rl.toml"
    path.write_text(_replace(BASE["rl"], "batch_size = 8", "batch_size = 8\nbatch_sise = 16"))
    result = run_cli("--json", "config", "validate", str(path))
    assert result.exit_code == 0
    (report,) = result.json()["files"]
    (warning,) = [i for i in report["issues"] if i["severity"] == "warning"]
    assert warning["key"] == "[training].batch_sise" and "did you mean `batch_size`?" in warning["message"]
    assert warning["fix"] == "rename `batch_sise` to `batch_size` if that is what you meant"
    assert result.stderr == ""
