"""`synth-ai train --dry-run`: the exact requests a run would make, in order, with secrets masked; flags, env
files, the backend URL and config selection. Nothing here touches the network."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_cli

from synth_ai.env.secrets import mask_secret

SYNTH_KEY = "sk-test-PLANTED-0123456789abcdef"
ENV_KEY = "env-PLANTED-abcdefghijklmnopqrstuvwxyz"
API = "https://backend.example.test/api"
GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(autouse=True)
def restore_environ():
    """`train` loads .env files into the process environment; put it back afterwards."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)


@pytest.fixture
def examples(isolated_home: Path) -> Path:
    """A copy of examples/configs and examples/datasets in the working directory (paths in the configs are
    relative to it, as when a user runs them from the repository root)."""
    for part in ("configs", "datasets"):
        shutil.copytree(REPO_ROOT / "examples" / part, isolated_home / "examples" / part)
    return isolated_home


def _dry(*args: str):
    return run_cli("--json", "train", "--dry-run", *args)


def _no_secret(result) -> None:
    for text in (result.stdout, result.stderr):
        assert SYNTH_KEY not in text and ENV_KEY not in text


# ---------------------------------------------------------------------------- RL


def test_rl_dry_run_json(keys, examples: Path):
    result = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml", "--backend", "https://backend.example.test")
    assert result.exit_code == 0, result.stdout + result.stderr
    _no_secret(result)
    doc = json.loads(result.stdout)
    assert doc["dry_run"] is True and doc["type"] == "rl" and doc["model"] == "Qwen/Qwen3-4B"
    assert doc["backend"]["api_base"] == API and doc["backend"]["source"] == "--backend"
    assert doc["task_url"] == "http://127.0.0.1:8001"
    steps = [(r["method"], r["url"]) for r in doc["requests"]]
    # the order submission runs them in: checked locally before the key is shared, shared before the backend
    # verifies the app with it
    assert steps == [
        ("GET", "http://127.0.0.1:8001/health"),
        ("GET", "http://127.0.0.1:8001/task_info"),
        ("POST", f"{API}/v1/env-keys"),
        ("POST", f"{API}/rl/verify_task_app"),
        ("POST", f"{API}/rl/jobs"),
    ]
    assert [r["name"] for r in doc["requests"]] == ["check-task-app-health", "check-task-app-task-info",
                                                    "share-environment-key", "backend-verifies-task-app",
                                                    "create-job"]
    health, task_info, share, verify, create = doc["requests"]
    masked = mask_secret(SYNTH_KEY)
    assert masked == "sk-t…ef"
    assert verify["headers"]["Authorization"] == f"Bearer {masked}"
    assert verify["json"] == {"endpoint_base_url": "http://127.0.0.1:8001"}
    assert share["headers"]["Authorization"] == f"Bearer {masked}"
    assert share["json"]["name"] == "ENVIRONMENT_API_KEY" and mask_secret(ENV_KEY) in share["json"]["ciphertext_b64"]
    assert health["headers"]["X-API-Key"] == mask_secret(ENV_KEY) == task_info["headers"]["X-API-Key"]
    assert create["headers"]["Authorization"] == f"Bearer {masked}"
    assert create["headers"]["Content-Type"] == "application/json"
    # the body is the golden /rl/jobs body (same backend URL)
    golden = json.loads((GOLDEN / "rl_text_qwen3_4b.rl_jobs.json").read_text())
    assert create["json"] == golden


def test_rl_dry_run_human(keys, examples: Path):
    result = run_cli("train", "--dry-run", "--config", "examples/configs/rl_vision_qwen3_vl_4b.toml",
                     "--backend", "https://backend.example.test/")
    assert result.exit_code == 0, result.stderr
    _no_secret(result)
    out = result.stdout
    assert "Using config: examples/configs/rl_vision_qwen3_vl_4b.toml (rl)" in out
    assert f"Backend: {API} (--backend)" in out
    assert "Dry run: nothing was sent." in out
    positions = [out.index(line) for line in (
        "1. GET http://127.0.0.1:8001/health",
        "2. GET http://127.0.0.1:8001/task_info",
        f"3. POST {API}/v1/env-keys",
        f"4. POST {API}/rl/verify_task_app",
        f"5. POST {API}/rl/jobs",
    )]
    assert positions == sorted(positions)
    assert f"Authorization: Bearer {mask_secret(SYNTH_KEY)}" in out
    assert f"X-API-Key: {mask_secret(ENV_KEY)}" in out
    assert '"job_type": "rl"' in out and '"base_model": "Qwen/Qwen3-VL-4B-Instruct"' in out


def test_plan_itself_holds_no_secret(keys, examples: Path):
    """The output sink redacts known secrets as a safety net; the plan must not need it."""
    from synth_ai.cli.prompts import choose
    from synth_ai.train.prepare import TrainOptions, prepare_training

    for config in ("examples/configs/rl_text_qwen3_4b.toml", "examples/configs/sft_full_qwen3_4b.toml"):
        prepared = prepare_training(TrainOptions(configs=[config], backend="https://backend.example.test"), choose)
        text = json.dumps([r.to_dict() for r in prepared.plan.requests])
        assert SYNTH_KEY not in text and ENV_KEY not in text
        assert json.dumps(mask_secret(SYNTH_KEY))[1:-1] in text


def test_rl_idempotency_shown(keys, examples: Path):
    doc = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml", "--idempotency", "run-2024-01").json()
    assert doc["requests"][-1]["headers"]["Idempotency-Key"] == "run-2024-01"
    doc = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml").json()
    assert doc["requests"][-1]["headers"]["Idempotency-Key"].startswith("<generated at submit")


def test_rl_dry_run_without_keys_says_so(examples: Path):
    result = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml", "--backend", "https://backend.example.test")
    assert result.exit_code == 0
    doc = result.json()
    health, _task_info, share, verify = doc["requests"][:4]
    assert "not set" in verify["headers"]["Authorization"]
    assert "not set" in health["headers"]["X-API-Key"]
    assert "not set" in share["json"]["ciphertext_b64"]
    assert doc["notes"], "a missing API key must be pointed out"


def test_rl_dry_run_shows_the_environment_key_submission_would_send(examples: Path):
    """Keys `synth-ai setup` saved in ~/.synth-ai/config.json are what submission sends; the plan must show them."""
    from synth_ai.env.paths import data_dir

    (data_dir() / "config.json").write_text(json.dumps({"SYNTH_API_KEY": SYNTH_KEY, "ENVIRONMENT_API_KEY": ENV_KEY}))
    result = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml", "--backend", "https://backend.example.test")
    assert result.exit_code == 0, result.stdout
    _no_secret(result)
    health, _task_info, _share, verify = result.json()["requests"][:4]
    assert verify["headers"]["Authorization"] == f"Bearer {mask_secret(SYNTH_KEY)}"
    assert health["headers"]["X-API-Key"] == mask_secret(ENV_KEY)


def test_rl_flags_that_only_apply_to_sft_are_reported(keys, examples: Path):
    doc = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml", "--dataset", "x.jsonl", "--examples", "3").json()
    messages = [n["message"] for n in doc["notes"]]
    assert "--dataset only applies to SFT configs; ignored." in messages
    assert "--examples only applies to SFT configs; ignored." in messages


# ---------------------------------------------------------------------------- SFT


def test_sft_dry_run_json(keys, examples: Path):
    result = _dry("--config", "examples/configs/sft_lora_qwen3_vl_2b.toml", "--backend", "https://backend.example.test",
                  "--idempotency", "sft-key-1")
    assert result.exit_code == 0, result.stdout + result.stderr
    _no_secret(result)
    doc = json.loads(result.stdout)
    assert doc["type"] == "sft" and doc["model"] == "Qwen/Qwen3-VL-2B-Instruct"
    assert doc["dataset"] == str(examples / "examples/datasets/sft_vision_small.jsonl")
    steps = [(r["method"], r["url"].split("/api", 1)[1]) for r in doc["requests"]]
    assert [s[0] for s in steps] == ["POST", "POST", "GET", "POST", "POST"]
    assert steps[0][1] == steps[1][1] == "/files"
    assert steps[2][1].startswith("/files/<") and steps[3][1] == "/learning/jobs"
    assert steps[4][1].startswith("/learning/jobs/<") and steps[4][1].endswith(">/start")
    train_up, val_up, ready, create, start = doc["requests"]
    for request in doc["requests"]:
        assert request["headers"]["Authorization"] == f"Bearer {mask_secret(SYNTH_KEY)}"
    assert train_up["multipart"]["purpose"] == "fine-tune"
    assert train_up["multipart"]["file"]["content_type"] == "application/jsonl"
    assert train_up["multipart"]["file"]["records"] == 8
    data = (examples / "examples/datasets/sft_vision_small.jsonl").read_bytes()
    assert train_up["multipart"]["file"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert train_up["multipart"]["file"]["bytes"] == len(data)
    # --idempotency names the job creation; every other POST gets its own key at submit
    assert create["headers"]["Idempotency-Key"] == "sft-key-1"
    for other in (train_up, val_up, start):
        assert other["headers"]["Idempotency-Key"] != "sft-key-1"
    assert "Idempotency-Key" not in ready["headers"]
    assert start["json"] == {}
    # the body is the golden /learning/jobs body, up to the ids only known after the uploads
    golden = json.loads((GOLDEN / "sft_lora_qwen3_vl_2b.learning_jobs.json").read_text())
    body = create["json"]
    assert body["training_file_id"].startswith("<")
    assert body["metadata"]["effective_config"]["data"]["validation_files"][0].startswith("<")
    golden["training_file_id"] = body["training_file_id"]
    golden["metadata"]["effective_config"]["data"]["validation_files"] = \
        body["metadata"]["effective_config"]["data"]["validation_files"]
    assert body == golden


def test_sft_dry_run_human(keys, examples: Path):
    result = run_cli("train", "--dry-run", "--config", "examples/configs/sft_full_qwen3_4b.toml")
    assert result.exit_code == 0, result.stderr
    _no_secret(result)
    out = result.stdout
    assert "Using config: examples/configs/sft_full_qwen3_4b.toml (sft)" in out
    assert "Backend: http://127.0.0.1:8000/api (embedded default)" in out
    api = "http://127.0.0.1:8000/api"
    positions = [out.index(line) for line in (f"1. POST {api}/files", f"2. GET {api}/files/<",
                                              f"3. POST {api}/learning/jobs", f"4. POST {api}/learning/jobs/<")]
    assert positions == sorted(positions)
    assert f"Authorization: Bearer {mask_secret(SYNTH_KEY)}" in out
    assert '"training_type": "sft_offline"' in out and '"model": "Qwen/Qwen3-4B"' in out


def _first_records(path: Path, n: int) -> bytes:
    lines = [line for line in path.read_bytes().split(b"\n") if line.strip()]
    return b"".join(line + b"\n" for line in lines[:n])


@pytest.mark.parametrize("n", [1, 5, 24, 100])
def test_sft_examples_limit(keys, examples: Path, n: int):
    doc = _dry("--config", "examples/configs/sft_full_qwen3_4b.toml", "--examples", str(n)).json()
    upload = doc["requests"][0]["multipart"]["file"]
    expected = _first_records(examples / "examples/datasets/sft_math_small.jsonl", n)
    assert upload["records"] == min(n, 24)
    assert upload["filename"] == f"sft_math_small.head{n}.jsonl"
    assert upload["sha256"] == hashlib.sha256(expected).hexdigest()
    assert upload["bytes"] == len(expected)


def test_sft_examples_skips_blank_lines_and_adds_final_newline(keys, examples: Path):
    dataset = examples / "gappy.jsonl"
    dataset.write_bytes(b'{"a": 1}\n\n   \n{"b": 2}\n{"c": 3}')  # blank lines, no newline at the end
    doc = _dry("--config", "examples/configs/sft_full_qwen3_4b.toml", "--dataset", str(dataset),
               "--examples", "3").json()
    upload = doc["requests"][0]["multipart"]["file"]
    assert upload["records"] == 3
    assert upload["sha256"] == hashlib.sha256(b'{"a": 1}\n{"b": 2}\n{"c": 3}\n').hexdigest()
    whole = _dry("--config", "examples/configs/sft_full_qwen3_4b.toml", "--dataset", str(dataset)).json()
    assert whole["requests"][0]["multipart"]["file"]["sha256"] == hashlib.sha256(dataset.read_bytes()).hexdigest()


@pytest.mark.parametrize("n", ["0", "-3"])
def test_sft_examples_must_be_positive(keys, examples: Path, n: str):
    result = run_cli("train", "--dry-run", "--config", "examples/configs/sft_full_qwen3_4b.toml", "--examples", n)
    assert result.exit_code == 2  # a bad flag value is a usage error
    assert "--examples" in result.stderr and "x>=1" in result.stderr


def test_sft_dataset_flag_overrides_job_data(keys, examples: Path):
    other = examples / "other.jsonl"
    other.write_text('{"messages": []}\n')
    doc = _dry("--config", "examples/configs/sft_full_qwen3_4b.toml", "--dataset", "other.jsonl").json()
    assert doc["dataset"] == str(other)
    assert doc["requests"][0]["multipart"]["file"]["path"] == str(other)


def test_sft_missing_dataset_is_an_error_for_train(keys, examples: Path):
    result = run_cli("train", "--dry-run", "--config", "examples/configs/sft_full_qwen3_4b.toml",
                     "--dataset", "missing.jsonl")
    assert result.exit_code == 3 and "dataset not found" in result.stderr
    (examples / "examples/datasets/sft_math_small.jsonl").unlink()
    result = run_cli("train", "--dry-run", "--config", "examples/configs/sft_full_qwen3_4b.toml")
    assert result.exit_code == 3 and "[job].data" in result.stderr


def test_sft_flags_that_only_apply_to_rl_are_reported(keys, examples: Path):
    doc = _dry("--config", "examples/configs/sft_full_qwen3_4b.toml", "--task-url", "http://x:1").json()
    assert "--task-url only applies to RL configs; ignored." in [n["message"] for n in doc["notes"]]


# ---------------------------------------------------------------------------- env files and backend


def test_env_file_missing_exits_8(examples: Path):
    result = run_cli("train", "--dry-run", "--config", "examples/configs/rl_text_qwen3_4b.toml",
                     "--env-file", "nope.env")
    assert result.exit_code == 8
    assert "Env file not found" in result.stderr and "nope.env" in result.stderr


def test_env_file_that_is_not_utf8_is_invalid_input_not_a_crash(examples: Path, tmp_path: Path):
    env = tmp_path / "latin1.env"
    env.write_bytes(b"TASK_APP_URL=http://caf\xe9:1\n")
    result = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml", "--env-file", str(env))
    assert result.exit_code == 3, result.stdout
    error = result.json()["error"]
    assert error["code"] == "invalid_input" and str(env) in error["message"] and "UTF-8" in error["message"]


def test_env_file_provides_task_url_and_keys(examples: Path, tmp_path: Path):
    env = tmp_path / "secrets.env"
    env.write_text(f"TASK_APP_URL=http://from-env-file:7/\nSYNTH_API_KEY={SYNTH_KEY}\nENVIRONMENT_API_KEY={ENV_KEY}\n")
    result = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml", "--env-file", str(env),
                  "--backend", "https://backend.example.test")
    assert result.exit_code == 0, result.stdout
    _no_secret(result)
    doc = result.json()
    assert doc["env_files"] == [str(env)]
    assert doc["task_url"] == "http://from-env-file:7"
    assert doc["requests"][-1]["headers"]["Authorization"] == f"Bearer {mask_secret(SYNTH_KEY)}"
    assert doc["requests"][0]["url"] == "http://from-env-file:7/health"


def test_env_file_does_not_override_process_env(examples: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TASK_APP_URL", "http://from-process:1")
    env = tmp_path / "a.env"
    env.write_text("TASK_APP_URL=http://from-env-file:7\n")
    doc = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml", "--env-file", str(env)).json()
    assert doc["task_url"] == "http://from-process:1"


def test_first_env_file_wins(examples: Path, tmp_path: Path):
    first, second = tmp_path / "first.env", tmp_path / "second.env"
    first.write_text("TASK_APP_URL=http://first:1\n")
    second.write_text("TASK_APP_URL=http://second:2\nTASK_APP_BASE_URL=http://second-base:3\n")
    doc = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml", "--env-file", str(first),
               "--env-file", str(second)).json()
    assert doc["task_url"] == "http://first:1"
    assert doc["env_files"] == [str(first), str(second)]


def test_nearest_env_file_is_loaded(examples: Path):
    (examples / ".env").write_text("TASK_APP_BASE_URL=http://nearest:5\n")
    doc = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml").json()
    assert doc["env_files"] == [str(examples / ".env")]
    assert doc["task_url"] == "http://nearest:5"


@pytest.mark.parametrize("flag,api", [
    ("http://host.test:9000", "http://host.test:9000/api"),
    ("http://host.test:9000/", "http://host.test:9000/api"),
    ("https://host.test/api", "https://host.test/api"),
    ("https://host.test/api/", "https://host.test/api"),
    ("  https://host.test/prefix  ", "https://host.test/prefix/api"),
])
def test_backend_flag_normalised_to_api(examples: Path, flag: str, api: str):
    doc = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml", "--backend", flag).json()
    assert doc["backend"]["api_base"] == api and doc["backend"]["source"] == "--backend"
    assert doc["requests"][3]["url"] == f"{api}/rl/verify_task_app"
    assert doc["requests"][-1]["json"]["metadata"]["backend_base_url"] == api


def test_backend_from_environment(examples: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BACKEND_BASE_URL", "https://env-backend.test/")
    doc = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml").json()
    assert doc["backend"] == {"api_base": "https://env-backend.test/api", "source": "BACKEND_BASE_URL",
                              "embedded": False}
    doc = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml", "--backend", "http://flag.test").json()
    assert doc["backend"]["api_base"] == "http://flag.test/api"


def test_backend_flag_must_be_http(examples: Path):
    result = run_cli("train", "--dry-run", "--config", "examples/configs/rl_text_qwen3_4b.toml", "--backend", "host:1")
    assert result.exit_code == 3 and "must start with http:// or https://" in result.stderr


# ---------------------------------------------------------------------------- choosing the config


def test_several_configs_without_a_terminal(examples: Path):
    result = run_cli("train", "--dry-run", "--config", "examples/configs/rl_text_qwen3_4b.toml",
                     "--config", "examples/configs/sft_full_qwen3_4b.toml")
    assert result.exit_code == 3
    assert "Several training configs match" in result.stderr and "Pass exactly one with --config" in result.stderr
    doc = _dry("--config", "examples/configs/rl_text_qwen3_4b.toml",
               "--config", "examples/configs/sft_full_qwen3_4b.toml").json()
    assert doc["error"]["exit_code"] == 3


def test_no_config_found(isolated_home: Path):
    result = run_cli("train", "--dry-run")
    assert result.exit_code == 3
    assert "No training configs found" in result.stderr and "--config" in result.stderr


def test_one_discovered_config_is_used(isolated_home: Path):
    (isolated_home / "configs").mkdir()
    shutil.copy(REPO_ROOT / "examples/configs/rl_text_qwen3_4b.toml", isolated_home / "configs" / "mine.toml")
    (isolated_home / "configs" / "eval.toml").write_text('[eval]\napp_id = "x"\nmodel = "m"\nseeds = [1]\n')
    (isolated_home / "broken.toml").write_text("[oops\n")
    doc = _dry().json()
    assert doc["config"].endswith("configs/mine.toml") and doc["type"] == "rl"


def test_discovery_does_not_follow_linked_folders_or_count_a_config_twice(isolated_home: Path):
    project = isolated_home / "project"
    project.mkdir()
    shutil.copy(REPO_ROOT / "examples/configs/rl_text_qwen3_4b.toml", project / "rl.toml")
    (project / "up").symlink_to("..")  # a loop back up the tree
    (project / "same.toml").symlink_to("rl.toml")
    os.chdir(project)
    doc = _dry().json()
    assert doc["config"].endswith("rl.toml") and doc["type"] == "rl"


def test_discovery_respects_type(isolated_home: Path):
    shutil.copy(REPO_ROOT / "examples/configs/rl_text_qwen3_4b.toml", isolated_home / "rl.toml")
    shutil.copy(REPO_ROOT / "examples/configs/sft_full_qwen3_4b.toml", isolated_home / "sft.toml")
    assert run_cli("train", "--dry-run").exit_code == 3  # two candidates, no terminal to choose
    doc = _dry("--type", "rl").json()
    assert doc["config"].endswith("rl.toml")


def test_json_mode_is_one_document_on_stdout(keys, examples: Path):
    result = _dry("--config", "examples/configs/sft_lora_qwen3_vl_2b.toml")
    json.loads(result.stdout)
    assert result.stderr.strip() == "" or not result.stderr.lstrip().startswith("{")
    error = _dry("--config", "examples/configs/sft_lora_qwen3_vl_2b.toml", "--examples", "0")
    assert error.exit_code == 2
    assert json.loads(error.stdout)["error"]["code"] == "usage"


def test_poll_values_must_be_positive(examples: Path):
    result = run_cli("train", "--dry-run", "--config", "examples/configs/rl_text_qwen3_4b.toml",
                     "--poll-interval", "0")
    assert result.exit_code == 2


def test_train_without_dry_run_submits_for_real(examples: Path, monkeypatch: pytest.MonkeyPatch):
    """Without --dry-run nothing is printed as a plan: the run submits, so a missing task-app key stops it (exit 4)
    before any request is made (the backend URL points nowhere)."""
    monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
    result = run_cli("train", "--config", "examples/configs/rl_text_qwen3_4b.toml", "--backend", "http://127.0.0.1:9")
    assert result.exit_code == 4, result.stdout + result.stderr
    assert "ENVIRONMENT_API_KEY" in result.stderr
    assert "Dry run" not in result.stdout and "Traceback" not in result.stderr
    _no_secret(result)
