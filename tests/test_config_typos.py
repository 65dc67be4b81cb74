"""Unknown keys in the tables our schema defines are errors (exit 3) with "did you mean" when one looks like a known
key, at any depth of any config kind, in `config validate`, `train`, `eval` and `filter`: a misspelt key used to be
forwarded with a warning while the setting it meant kept its default (`min_oficial_score = 0.3` kept every session;
`max_stalenes = 2` trained synchronously). Open tables (`env_config`, `tags`, ...) still take any key, and keys kept
only for synth-ai 0.2.17 configs are named in a note."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from synth_ai.config.common import ResolveContext
from synth_ai.config.loader import load_config
from synth_ai.errors import ConfigError
from synth_ai.train.request_bodies import build_rl_payload, build_sft_payload

DATA = Path(__file__).parent / "data" / "broken_configs"
BASE = {kind: (DATA / f"{kind}_base.toml").read_text() for kind in ("rl", "sft", "eval", "filter")}


def _replace(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _path(tmp_path: Path, kind: str, text: str) -> Path:
    path = tmp_path / "work" / f"{kind}.toml"
    path.write_text(text)
    return path


def _load(tmp_path: Path, kind: str, text: str):
    return load_config(_path(tmp_path, kind, text), kind, ResolveContext(environ={}))


def _refusal(tmp_path: Path, kind: str, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, kind, text)
    return info.value


@pytest.fixture(autouse=True)
def dataset(isolated_home: Path) -> None:
    (isolated_home / "train.jsonl").write_text('{"messages": []}\n')


TYPOS = [
    # kind, old snippet, new snippet, refused key path, suggestion, (unused: where 0.2.17 forwarded it)
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
    ("rl", "batch_size = 8", "batch_size = 8\nmax_stalenes = 2", "[training].max_stalenes", "max_staleness",
     ("training", "max_stalenes")),
]


@pytest.mark.parametrize("kind,old,new,key,suggestion,forwarded_at", TYPOS, ids=[t[3] for t in TYPOS])
def test_a_typo_is_an_error_with_did_you_mean_at_its_line(kind, old, new, key, suggestion, forwarded_at, tmp_path):
    text = _replace(BASE[kind], old, new)
    refusal = _refusal(tmp_path, kind, text)
    (issue,) = [i for i in refusal.issues if i.severity == "error"]
    assert issue.key == key and issue.message == f"unknown key; did you mean `{suggestion}`?"
    typo = key.rsplit(".", 1)[-1].strip("[]")
    assert issue.fix == f"rename `{typo}` to `{suggestion}`"
    expected_line = next(n for n, line in enumerate(text.splitlines(), 1)
                         if line.startswith(typo) or line.startswith(f"[{typo}]"))
    assert issue.line == expected_line
    assert refusal.exit_code == 3


def test_a_key_like_no_known_one_is_an_error_that_lists_the_tables_keys(tmp_path: Path):
    refusal = _refusal(tmp_path, "rl", _replace(BASE["rl"], 'gpu_type = "H100"', 'gpu_type = "H100"\ncolour = 1'))
    (issue,) = [i for i in refusal.issues if i.severity == "error"]
    assert issue.key == "[compute].colour" and issue.message == "unknown key"
    assert issue.fix == "remove it; [compute] takes: gpu_count, gpu_type, nodes, topology"
    refusal = _refusal(tmp_path, "rl", _replace(BASE["rl"], "batch_size = 8", "batch_size = 8\ncustom_flag = true"))
    (issue,) = [i for i in refusal.issues if i.severity == "error"]
    assert issue.key == "[training].custom_flag"
    assert issue.fix == "remove it; `synth-ai config schema` lists the keys [training] takes"
    refusal = _refusal(tmp_path, "rl", BASE["rl"] + '\n[my_extras]\nowner = "team-a"\n')
    assert [i.key for i in refusal.issues if i.severity == "error"] == ["my_extras"]


def test_open_tables_take_any_key_and_forward_it(tmp_path: Path):
    text = BASE["rl"] + '\n[tags]\nowner = "team-a"\n\n[rollout.env_config]\ndifficulty = "hard"\n'
    loaded = _load(tmp_path, "rl", text)
    assert [i for i in loaded.issues if i.severity != "note"] == []
    assert loaded.resolved["tags"] == {"owner": "team-a"}
    assert loaded.resolved["rollout"]["env_config"] == {"difficulty": "hard"}
    payload = build_rl_payload(loaded, api_base="http://backend.test/api")
    assert payload["data"]["config"]["tags"] == {"owner": "team-a"}
    assert payload["data"]["config"]["rollout"]["env_config"] == {"difficulty": "hard"}


def test_a_policy_config_keeps_the_task_apps_own_keys_but_not_typos_of_ours(tmp_path: Path):
    text = _replace(BASE["rl"], "temperature = 0.7", 'temperature = 0.7\nreasoning_effort = "low"\ntop_k = 20')
    loaded = _load(tmp_path, "rl", text)
    assert loaded.resolved["rollout"]["policy_config"]["reasoning_effort"] == "low"
    payload = build_rl_payload(loaded, api_base="http://backend.test/api")
    assert payload["data"]["config"]["rollout"]["policy_config"]["top_k"] == 20
    refusal = _refusal(tmp_path, "rl", _replace(BASE["rl"], "temperature = 0.7", "temperature = 0.7\nmax_token = 9"))
    assert [(i.key, i.message) for i in refusal.issues if i.severity == "error"] == [
        ("[rollout.policy_config].max_token", "unknown key; did you mean `max_tokens`?")]


def test_a_hyperparameter_the_trainer_reads_is_forwarded_into_the_sft_payload(tmp_path: Path):
    text = _replace(BASE["sft"], "learning_rate = 1e-5", "learning_rate = 1e-5\nlr_scheduler = \"cosine\"")
    loaded = _load(tmp_path, "sft", text)
    assert loaded.warnings == []
    payload = build_sft_payload(loaded, training_file_id="file-1")
    assert payload["hyperparameters"]["lr_scheduler"] == "cosine"


def test_keys_kept_only_for_0217_are_named_in_a_note(tmp_path: Path):
    text = _replace(BASE["rl"], "[evaluation]", "[training.weight_sync]\nenable = true\nverify_every_k = 3\n\n"
                                                "[evaluation]") + "\n[data]\nseeds = [0, 1]\n"
    loaded = _load(tmp_path, "rl", text)
    notes = {n.key: n.message for n in loaded.notes}
    assert notes["[training.weight_sync].verify_every_k"].startswith(
        "kept for synth-ai 0.2.17 configs; the embedded backend does not use it: the trainer's weights reach")
    assert "new seeds" in notes["[data]"]
    assert loaded.resolved["data"] == {"seeds": [0, 1]}  # sent as written: a hosted backend may read it
    sft = _load(tmp_path, "sft", _replace(BASE["sft"], "bf16 = true", "bf16 = false\nfp16 = true"))
    assert [n.key for n in sft.notes if "0.2.17" in n.message] == ["[hyperparameters.parallelism].fp16"]
    assert not [n for n in _load(tmp_path, "rl", BASE["rl"]).notes if "0.2.17" in n.message]


def test_typo_of_a_required_key_is_an_error_and_a_hint(tmp_path: Path):
    """`lable` instead of `label`: the required key is missing (error) and the typo is named (warning)."""
    path = tmp_path / "work" / "rl.toml"
    path.write_text(_replace(BASE["rl"], 'label = "base-rl"', 'lable = "base-rl"'))
    result = run_cli("config", "validate", str(path))
    assert result.exit_code == 3
    assert "[model].label: required key is missing" in result.stdout
    assert "[model].lable: unknown key; did you mean `label`?" in result.stdout


def test_a_typo_is_refused_by_config_validate_train_eval_and_filter(tmp_path: Path, isolated_home: Path):
    rl = _path(tmp_path, "rl", _replace(BASE["rl"], "batch_size = 8", "batch_size = 8\nmax_stalenes = 2"))
    result = run_cli("--json", "config", "validate", str(rl))
    assert result.exit_code == 3
    (report,) = result.json()["files"]
    (error,) = [i for i in report["issues"] if i["severity"] == "error"]
    assert error["key"] == "[training].max_stalenes" and error["message"] == "unknown key; did you mean `max_staleness`?"
    assert error["fix"] == "rename `max_stalenes` to `max_staleness`"
    trained = run_cli("train", "--type", "rl", "--dry-run", "--config", str(rl))
    assert trained.exit_code == 3 and "[training].max_stalenes: unknown key; did you mean `max_staleness`?" in \
        trained.stderr
    evaluated = run_cli("eval", "--config", str(_path(tmp_path, "eval", _replace(
        BASE["eval"], "concurrency = 2", "concurrency = 2\nmax_llm_call = 3"))))
    assert evaluated.exit_code == 3 and "[eval].max_llm_call: unknown key; did you mean `max_llm_calls`?" in \
        evaluated.stderr
    assert not (isolated_home / "traces").exists()


def test_filter_refuses_a_typo_and_leaves_its_output_alone(tmp_path: Path, isolated_home: Path):
    output = isolated_home / "ft_data" / "out.jsonl"
    output.parent.mkdir()
    output.write_text('{"messages": [{"role": "user", "content": "kept"}]}\n')
    before = output.stat()
    config = _path(tmp_path, "filter", _replace(BASE["filter"], "min_official_score = 0.5",
                                                "min_oficial_score = 0.5"))
    result = run_cli("filter", "--config", str(config))
    assert result.exit_code == 3, result.stdout + result.stderr
    assert "[filter].min_oficial_score: unknown key; did you mean `min_official_score`?" in result.stderr
    assert output.read_text() == '{"messages": [{"role": "user", "content": "kept"}]}\n'
    assert output.stat().st_mtime_ns == before.st_mtime_ns and sorted(output.parent.iterdir()) == [output]


def test_the_schema_says_which_tables_take_other_keys():
    from synth_ai.config.schema import config_schema

    rl = config_schema("rl")
    assert rl["additionalProperties"] is False and rl["$defs"]["TrainingSection"]["additionalProperties"] is False
    assert rl["$defs"]["PolicyRuntimeSection"]["additionalProperties"] is True
    assert config_schema("filter")["$defs"]["FilterConfig"]["additionalProperties"] is False
