"""The product documentation, as written: every TOML block, command line and flag of the five pages in
`/work/shared/reference/product-docs/` works with this implementation.

The snippets live verbatim in `tests/data/product_docs/` (README.md there says what each must do); commands are
in `commands.txt` and run as written, minus the `uvx` launcher (`uvx --from .` itself is tested in
`test_train_capability.py`) and with placeholders (`<job_id>`, `...`, the hosted URL) filled in. Commands that
would start real work are checked with `--dry-run` (the exact requests), except the SFT loop, which runs for real
against an embedded backend with the tiny local model, as does the agent loop (eval -> filter -> train -> poll ->
eval of the fine-tuned model).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from backend_support import TINY_TEXT, BackendProcess, chat_jsonl, serve_backend
from conftest import REPO_ROOT, run_cli

DOCS = Path(__file__).parent / "data" / "product_docs"
PENDING: set[str] = set()  # every documented command has a test
VL_EXAMPLE = REPO_ROOT / "examples/qwen_vl/configs/crafter_rl_vision_qwen3vl4b.toml"
VL_THINKING_EXAMPLE = REPO_ROOT / "examples/qwen_vl/configs/crafter_rl_vision_qwen3vl4b_thinking.toml"
RL_TEXT_EXAMPLE = REPO_ROOT / "examples/configs/rl_text_qwen3_4b.toml"


def _commands() -> dict[str, str]:
    commands: dict[str, str] = {}
    for block in (DOCS / "commands.txt").read_text().split("\n\n"):
        lines = block.strip().splitlines()
        head = next((i for i, line in enumerate(lines) if line.startswith("# id:")), None)
        if head is None:
            continue
        ident = lines[head].removeprefix("# id:").split("|")[0].strip()
        commands[ident] = "\n".join(lines[head + 1:])
    return commands


COMMANDS = _commands()


def argv(ident: str, *, replace: dict[str, str] | None = None) -> list[str]:
    """The command's arguments after `uvx synth-ai`, placeholders replaced."""
    text = COMMANDS[ident].replace("\\\n", " ")
    for old, new in (replace or {}).items():
        assert old in text, f"{old!r} is not in command {ident}"
        text = text.replace(old, new)
    words = shlex.split(text)
    assert words[:2] == ["uvx", "synth-ai"], words
    return words[2:]


def _dry_run(*args: str) -> dict[str, Any]:
    result = run_cli("--json", *args, "--dry-run")
    assert result.exit_code == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def _request(doc: dict[str, Any], step_word: str) -> dict[str, Any]:
    return next(r for r in doc["requests"] if step_word in r["step"])


def _docs_sft_workspace(work: Path) -> None:
    """What the SFT page's launch command expects in the working directory."""
    (work / "configs").mkdir(exist_ok=True)
    shutil.copy(DOCS / "sft_train.toml", work / "configs" / "train.toml")
    (work / "ft_data").mkdir(exist_ok=True)
    chat_jsonl(work / "ft_data" / "crafter_sft.jsonl", n=6)


def _subset(part: Any, whole: Any, path: str = "") -> list[str]:
    """Where `part` (a parsed snippet) differs from `whole`; [] when every key and value of it is in `whole`."""
    if isinstance(part, dict):
        if not isinstance(whole, dict):
            return [f"{path}: not a table"]
        return [d for k, v in part.items()
                for d in (_subset(v, whole[k], f"{path}.{k}") if k in whole else [f"{path}.{k}: missing"])]
    return [] if part == whole else [f"{path}: {whole!r} != {part!r}"]


def test_every_documented_command_is_tested_or_pending():
    assert set(COMMANDS) == COVERED | PENDING
    assert not COVERED & PENDING


COVERED = {"sft-launch", "sft-status-curl", "serve", "deploy", "rl-launch", "rl-status-curl", "rl-launch-from-base",
           "rl-vision-launch", "rl-no-poll", "sft-no-poll", "legacy-rl-script", "eval-app", "eval-model", "eval",
           "filter"}


# ------------------------------------------------------------------------------------ SFT page (004)
def test_sft_config_validates_as_written(isolated_home: Path):
    shutil.copy(DOCS / "sft_train.toml", isolated_home / "train.toml")
    for args in (("train.toml",), ("--kind", "sft", "train.toml")):
        result = run_cli("--json", "config", "validate", *args)
        assert result.exit_code == 0, result.stdout
        (report,) = result.json()["files"]
        assert report["kind"] == "sft" and report["valid"] is True
        (note,) = [i for i in report["issues"] if i["key"] == "[algorithm]"]
        assert note["severity"] == "note"
        assert 'type = "offline", method = "sft", variety = "fft"' in note["message"]
        assert 'full_finetune' in note["message"]


def test_sft_launch_command_plans_upload_create_and_start(isolated_home: Path):
    _docs_sft_workspace(isolated_home)
    doc = _dry_run(*argv("sft-launch"))
    assert doc["type"] == "sft" and doc["model"] == "Qwen/Qwen3-4B"
    assert doc["dataset"] == str(isolated_home / "ft_data" / "crafter_sft.jsonl")
    steps = [(r["method"], r["url"].split("/api", 1)[1]) for r in doc["requests"]]
    assert steps == [("POST", "/files"), ("GET", "/files/<training file id, from the upload>"),
                     ("POST", "/learning/jobs"), ("POST", "/learning/jobs/<job id, from the create response>/start")]
    body = _request(doc, "create")["json"]
    assert body["hyperparameters"] == {"n_epochs": 2, "per_device_batch": 2, "gradient_accumulation_steps": 64,
                                       "learning_rate": 8e-6, "warmup_ratio": 0.03, "train_kind": "fft"}
    assert body["metadata"]["effective_config"] == {"compute": {"gpu_type": "H100", "gpu_count": 4, "nodes": 1},
                                                    "training": {"mode": "full_finetune", "use_qlora": False}}
    # Without --type the file is still unmistakably SFT.
    auto = _dry_run("train", "--config", "configs/train.toml", "--dataset", "ft_data/crafter_sft.jsonl")
    assert auto["type"] == "sft" and auto["requests"] == doc["requests"]


@pytest.mark.parametrize(("old", "new", "key", "fragment"), [
    ("per_device_batch = 2", "per_device_batch = -2", "[hyperparameters].per_device_batch", "greater than zero"),
    ("n_epochs = 2\n", "", "[hyperparameters]", "include at least one of n_epochs, total_steps"),
    ("warmup_ratio = 0.03", "warmup_ratio = 1.5", "[hyperparameters].warmup_ratio", "between 0 and 1"),
])
def test_sft_mistakes_in_the_docs_shape_are_reported_by_key(isolated_home: Path, old: str, new: str, key: str,
                                                            fragment: str):
    _docs_sft_workspace(isolated_home)
    config = isolated_home / "configs" / "train.toml"
    config.write_text(config.read_text().replace(old, new))
    result = run_cli("train", *argv("sft-launch")[1:], "--dry-run")
    assert result.exit_code == 3, result.stdout + result.stderr
    assert key in result.stderr and fragment in result.stderr
    assert "missing required [algorithm]" not in result.stderr and "cannot tell" not in result.stderr


@pytest.mark.parametrize(("training", "variety", "train_kind"), [
    ('mode = "full_finetune"\nuse_qlora = false', "fft", "fft"),
    ('mode = "lora"', "lora", "peft"),
    ('mode = "qlora"\nuse_qlora = true', "lora", "peft"),
    ("use_qlora = true", "lora", "peft"),
    ("", "fft", "fft"),
])
def test_sft_default_algorithm_follows_the_training_mode(isolated_home: Path, training: str, variety: str,
                                                        train_kind: str):
    from synth_ai.config.common import ResolveContext
    from synth_ai.config.loader import load_config
    from synth_ai.train.request_bodies import build_sft_payload

    text = (DOCS / "sft_train.toml").read_text().replace('mode = "full_finetune"\nuse_qlora = false', training)
    (isolated_home / "train.toml").write_text(text)
    loaded = load_config(isolated_home / "train.toml", None, ResolveContext(environ={}))
    assert loaded.kind == "sft"
    assert loaded.resolved["algorithm"] == {"type": "offline", "method": "sft", "variety": variety}
    assert build_sft_payload(loaded)["hyperparameters"]["train_kind"] == train_kind
    (note,) = [n for n in loaded.notes if n.key == "[algorithm]"]
    assert f'variety = "{variety}"' in note.message


def test_sft_poll_seconds_is_how_long_train_follows_the_job(isolated_home: Path):
    """[job].poll_seconds (1800 in the docs config) bounds the follow unless --poll-timeout is given."""
    from synth_ai.train.prepare import TrainOptions, prepare_training

    _docs_sft_workspace(isolated_home)
    options = TrainOptions(configs=["configs/train.toml"], type="sft", dataset="ft_data/crafter_sft.jsonl")
    prepared = prepare_training(options, choose=None)
    assert prepared.follow_timeout(None) == 1800.0
    assert prepared.follow_timeout(60.0) == 60.0
    config = isolated_home / "configs" / "train.toml"
    config.write_text(config.read_text().replace("poll_seconds = 1800\n", ""))
    assert prepare_training(options, choose=None).follow_timeout(None) == 3600.0


def test_sft_required_and_optional_fields_as_documented(isolated_home: Path):
    """Required: job.model, job.data or --dataset, a step count. Optional: data.validation_path,
    training.validation.*, compute (omitted here)."""
    chat_jsonl(isolated_home / "train.jsonl")
    chat_jsonl(isolated_home / "val.jsonl", n=3)
    minimal = isolated_home / "minimal.toml"
    minimal.write_text('[job]\nmodel = "Qwen/Qwen3-4B"\n\n[hyperparameters]\ntotal_steps = 10\n')
    doc = _dry_run("train", "--type", "sft", "--config", str(minimal), "--dataset", "train.jsonl")
    assert _request(doc, "create")["json"]["hyperparameters"] == {"total_steps": 10, "train_kind": "fft"}
    missing_data = run_cli("train", "--type", "sft", "--config", str(minimal), "--dry-run")
    assert missing_data.exit_code == 3 and "[job].data" in missing_data.stderr and "--dataset" in missing_data.stderr
    optional = isolated_home / "optional.toml"
    optional.write_text(minimal.read_text() + '\n[data]\nvalidation_path = "val.jsonl"\n\n'
                        '[training.validation]\neval_steps = 5\nmetric_for_best_model = "val.loss"\n')
    doc = _dry_run("train", "--type", "sft", "--config", str(optional), "--dataset", "train.jsonl")
    hyper = _request(doc, "create")["json"]["hyperparameters"]
    assert hyper["eval_steps"] == 5 and hyper["metric_for_best_model"] == "val.loss"
    assert [r["step"] for r in doc["requests"]].count("upload validation dataset") == 1


def test_sft_flags_from_the_docs(isolated_home: Path):
    """--backend, --model, --examples N, --no-poll, --idempotency, and --env-file given twice (values layered)."""
    _docs_sft_workspace(isolated_home)
    (isolated_home / "secrets.env").write_text("SYNTH_API_KEY=aaaa_first_key_0123456781\n")
    (isolated_home / "target.env").write_text("BACKEND_BASE_URL=http://127.0.0.1:9\n"
                                              "SYNTH_API_KEY=bbbb_second_key_0123456782\n")
    doc = _dry_run(*argv("sft-launch"), "--env-file", "secrets.env", "--env-file", "target.env")
    assert doc["env_files"] == [str(isolated_home / "secrets.env"), str(isolated_home / "target.env")]
    assert doc["backend"]["api_base"] == "http://127.0.0.1:9/api"  # from the second file
    assert _request(doc, "create")["headers"]["Authorization"] == "Bearer aaaa…81"  # the first file's key wins
    doc = _dry_run(*argv("sft-launch"), "--backend", "http://127.0.0.1:7", "--model", "Qwen/Qwen3-8B",
                   "--examples", "2", "--no-poll", "--idempotency", "docs-key-1")
    assert {r["url"].split("/api")[0] for r in doc["requests"]} == {"http://127.0.0.1:7"}
    create = _request(doc, "create")
    assert create["json"]["model"] == "Qwen/Qwen3-8B" and create["headers"]["Idempotency-Key"] == "docs-key-1"
    assert _request(doc, "upload")["multipart"]["file"]["records"] == 2


def test_sft_vision_record_from_the_docs_is_a_valid_dataset(isolated_home: Path):
    record = json.loads((DOCS / "sft_vl_record.json").read_text())
    (isolated_home / "vl.jsonl").write_text(json.dumps(record) + "\n")
    result = run_cli("files", "validate", "--model", "Qwen/Qwen3-VL-4B-Instruct", "vl.jsonl")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "1 images" in result.stdout


def test_sft_vision_mode_needs_no_extra_knobs_and_takes_the_documented_override(isolated_home: Path):
    chat_jsonl(isolated_home / "train.jsonl")
    text = (DOCS / "sft_train.toml").read_text().replace("Qwen/Qwen3-4B", "Qwen/Qwen3-VL-4B-Instruct")
    (isolated_home / "vl.toml").write_text(text)
    doc = _dry_run("train", "--type", "sft", "--config", "vl.toml", "--dataset", "train.jsonl")
    body = _request(doc, "create")["json"]
    assert body["hyperparameters"]["per_device_batch"] == 1
    assert body["hyperparameters"]["gradient_accumulation_steps"] == 128
    assert body["hyperparameters"]["parallelism"] == {"bf16": True}
    assert body["metadata"]["effective_config"]["model_config"] == {
        "supports_vision": True, "max_images_per_message": 1, "vision_processor_id": "Qwen/Qwen3-VL-4B-Instruct"}
    (isolated_home / "vl2.toml").write_text(text + "\n[model]\nmax_images_per_message = 2\n")
    doc = _dry_run("train", "--type", "sft", "--config", "vl2.toml", "--dataset", "train.jsonl")
    assert _request(doc, "create")["json"]["metadata"]["effective_config"]["model_config"][
        "max_images_per_message"] == 2


# ------------------------------------------------------------------------------------ Qwen3-VL RL page (002)
CHECKLIST_ERRORS = {
    "[algorithm]", "[compute]", "[services].task_url", "[model].label", "[rollout].env_name", "[rollout].max_turns",
    "[rollout].episodes_per_batch", "[rollout].max_concurrent_rollouts", "[training].num_epochs",
    "[training].iterations_per_epoch", "[training].max_turns", "[training].group_size", "[training].learning_rate",
    "[training].weight_sync_interval", "[training].log_interval",
}


def test_qwen3_vl_checklist_alone_only_lacks_the_rest_of_a_config(isolated_home: Path):
    """A partial snippet: validated as RL, every error is a key the checklist does not mention; its JSON-style
    inline table is read (with a warning), not a syntax error."""
    result = run_cli("--json", "config", "validate", "--kind", "rl", str(DOCS / "qwen3_vl_checklist.toml"))
    assert result.exit_code == 3
    (report,) = result.json()["files"]
    errors = {i["key"] for i in report["issues"] if i["severity"] == "error"}
    assert errors == CHECKLIST_ERRORS
    (warning,) = [i for i in report["issues"] if i["severity"] == "warning"]
    assert warning["line"] == 20 and "not TOML; read as '='" in warning["message"]


def test_qwen3_vl_checklist_is_what_the_documented_example_holds(isolated_home: Path):
    checklist = tomllib.loads((DOCS / "qwen3_vl_checklist.toml").read_text().replace('"image":', '"image" ='))
    example = tomllib.loads(VL_EXAMPLE.read_text())
    assert _subset(checklist, example) == []
    result = run_cli("--json", "config", "validate", "--show-resolved", str(VL_EXAMPLE))
    assert result.exit_code == 0, result.stdout
    (report,) = result.json()["files"]
    assert not [i for i in report["issues"] if i["severity"] != "note"]
    assert _subset(checklist, report["resolved"]) == []


def test_thinking_policy_config_alone_and_in_the_thinking_example(isolated_home: Path):
    snippet = tomllib.loads((DOCS / "thinking_policy_config.toml").read_text())
    result = run_cli("--json", "config", "validate", "--kind", "rl", str(DOCS / "thinking_policy_config.toml"))
    assert result.exit_code == 3
    (report,) = result.json()["files"]
    assert not [i for i in report["issues"] if (i["key"] or "").startswith("[rollout.policy_config]")]
    assert _subset(snippet, tomllib.loads(VL_THINKING_EXAMPLE.read_text())) == []
    result = run_cli("--json", "config", "validate", "--show-resolved", str(VL_THINKING_EXAMPLE))
    assert result.exit_code == 0, result.stdout
    (report,) = result.json()["files"]
    assert not [i for i in report["issues"] if i["severity"] != "note"]
    assert report["resolved"]["rollout"]["policy_config"]["thinking_mode"] == "think"
    assert report["resolved"]["rollout"]["policy_config"]["thinking_budget"] == 512
    # The same block on an Instruct SKU does nothing, and says so.
    (isolated_home / "instruct.toml").write_text(VL_THINKING_EXAMPLE.read_text().replace("-Thinking", "-Instruct"))
    result = run_cli("--json", "config", "validate", "instruct.toml")
    (report,) = result.json()["files"]
    (warning,) = [i for i in report["issues"] if i["severity"] == "warning"]
    assert warning["key"] == "[rollout.policy_config].thinking_mode" and "not a thinking model" in warning["message"]


def test_rl_vision_launch_with_poll(monkeypatch: pytest.MonkeyPatch):
    """`--poll` is accepted: it is the default (follow the job), spelled out."""
    monkeypatch.chdir(REPO_ROOT)
    doc = _dry_run(*argv("rl-vision-launch"))
    assert doc["type"] == "rl" and doc["model"] == "Qwen/Qwen3-VL-4B-Instruct"
    assert doc["config"] == "examples/qwen_vl/configs/crafter_rl_vision_qwen3vl4b.toml"
    config = _request(doc, "create")["json"]["data"]["config"]
    assert config["model"]["supports_vision"] is True and config["vllm"]["limit_mm_per_prompt"] == {"image": 1}
    assert _dry_run(*[a for a in argv("rl-vision-launch") if a != "--poll"])["requests"] == doc["requests"]


# ------------------------------------------------------------------------------------ RL pages (000, 001, 003)
def test_rl_launch_commands(isolated_home: Path, monkeypatch: pytest.MonkeyPatch):
    (isolated_home / "configs").mkdir()
    shutil.copy(RL_TEXT_EXAMPLE, isolated_home / "configs" / "rl.toml")
    doc = _dry_run(*argv("rl-launch"))
    assert doc["type"] == "rl" and doc["task_url"] == "http://127.0.0.1:8001"
    assert [r["step"] for r in doc["requests"]] == ["check task app health", "check task app task_info",
                                                    "share ENVIRONMENT_API_KEY with the backend, sealed",
                                                    "backend verifies the task app", "create the job"]
    no_poll = _dry_run(*argv("rl-no-poll", replace={"...": "configs/rl.toml"}))
    assert no_poll["requests"] == doc["requests"]
    monkeypatch.chdir(REPO_ROOT)
    from_base = _dry_run(*argv("rl-launch-from-base"))
    assert from_base["model"] == "Qwen/Qwen3-4B"
    assert _request(from_base, "create")["json"]["data"]["base_model"] == "Qwen/Qwen3-4B"


def test_rl_flags_from_the_docs(isolated_home: Path):
    """--model (base or fine-tuned), --backend, --idempotency, --allow-experimental, --task-url,
    --poll-timeout / --poll-interval, --env-file given twice."""
    (isolated_home / "configs").mkdir()
    shutil.copy(RL_TEXT_EXAMPLE, isolated_home / "configs" / "rl.toml")
    base = argv("rl-launch")
    doc = _dry_run(*base, "--model", "ft:Qwen/Qwen3-4B:job_abc", "--backend", "http://127.0.0.1:7",
                   "--idempotency", "rl-key-1", "--task-url", "http://127.0.0.1:8123", "--poll-timeout", "60",
                   "--poll-interval", "2", "--no-poll")
    create = _request(doc, "create")
    assert create["url"] == "http://127.0.0.1:7/api/rl/jobs"
    assert create["headers"]["Idempotency-Key"] == "rl-key-1"
    assert create["json"]["data"]["model"] == "ft:Qwen/Qwen3-4B:job_abc"
    assert create["json"]["data"]["endpoint_base_url"] == "http://127.0.0.1:8123"
    refused = run_cli(*base, "--poll-interval", "0", "--dry-run")
    assert refused.exit_code == 2 and "--poll-interval" in refused.stderr  # a bad flag value: usage
    experimental = [*base, "--model", "Qwen/Qwen3-4B-Thinking-2507"]
    gated = run_cli(*experimental, "--dry-run")
    assert gated.exit_code == 3 and "--allow-experimental" in gated.stderr
    assert _dry_run(*experimental, "--allow-experimental")["type"] == "rl"
    (isolated_home / "a.env").write_text("ENVIRONMENT_API_KEY=cccc_env_key_0123456783\n")
    (isolated_home / "b.env").write_text("TASK_APP_URL=http://127.0.0.1:8444\n")
    layered = _dry_run(*base, "--env-file", "a.env", "--env-file", "b.env")
    assert layered["task_url"] == "http://127.0.0.1:8444"
    assert _request(layered, "health")["headers"]["X-API-Key"] == "cccc…83"


def test_rl_config_keys_the_pages_mention():
    """003: [model].source = "ft:…", [tags], [data].seeds; 001: training.async_semaphore_max."""
    from synth_ai.config.common import ResolveContext
    from synth_ai.config.loader import load_config

    from_ft = load_config(REPO_ROOT / "examples/warming_up_to_rl/configs/rl_from_ft.toml", "rl",
                          ResolveContext(environ={}))
    assert not from_ft.warnings
    assert from_ft.resolved["model"]["source"].startswith("ft:Qwen/Qwen3-4B:")
    assert from_ft.resolved["data"]["seeds"] == list(range(8)) and from_ft.resolved["tags"]
    thinking = load_config(REPO_ROOT / "examples/configs/rl_thinking_qwen3_4b.toml", "rl",
                           ResolveContext(environ={}, allow_experimental=True))
    assert thinking.resolved["training"]["async_semaphore_max"] == 8
    assert not [i for i in thinking.issues if "async_semaphore_max" in (i.key or "")]


def test_legacy_rl_script_runs_train_with_the_same_inputs(isolated_home: Path):
    """003's legacy command, with `uv run python` as this interpreter (uv run would sync the checkout's venv)."""
    text = COMMANDS["legacy-rl-script"]
    for old, new in (("https://<backend>/api", "http://127.0.0.1:9/api"), ("<key>", "sk_legacy_key_0123456789"),
                     ("https://<task-app>.modal.run", "http://127.0.0.1:8555"),
                     ("uv run python", shlex.quote(sys.executable))):
        assert old in text
        text = text.replace(old, new)
    result = subprocess.run(["bash", "-c", f"{text} --dry-run --json"], cwd=REPO_ROOT, capture_output=True, text=True,
                            env={**os.environ, "SYNTH_AI_HOME": str(isolated_home / "home")}, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["type"] == "rl" and doc["task_url"] == "http://127.0.0.1:8555"
    assert doc["backend"] == {"api_base": "http://127.0.0.1:9/api", "source": "BACKEND_BASE_URL", "embedded": False}
    create = _request(doc, "create")
    assert create["json"]["data"]["model"].startswith("ft:Qwen/Qwen3-4B:")
    assert create["json"]["data"]["config"]["model"]["source"] == create["json"]["data"]["model"]


@pytest.mark.parametrize("ident", ["serve", "deploy"])
def test_task_app_commands_with_the_placeholder_id_name_the_real_ones(ident: str):
    result = run_cli(*argv(ident))
    assert result.exit_code == 8, result.stdout + result.stderr
    assert "Task app 'your-task-id' not found" in result.stderr
    assert "math-single-step" in result.stderr and "Traceback" not in result.stderr


# ------------------------------------------------------------------------------------ the SFT loop, for real
@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    yield from serve_backend(tmp_path_factory, "docs-backend", tiny=(TINY_TEXT,))


def _curl(ident: str, backend: BackendProcess, job_id: str) -> dict[str, Any]:
    """The documented curl command, pointed at the embedded backend instead of the hosted one."""
    text = COMMANDS[ident]
    hosted = re.search(r"https://[^/\s]+", text)
    assert hosted is not None
    text = text.replace(hosted.group(0), backend.url).replace("<job_id>", job_id)
    env = {**os.environ, "SYNTH_API_KEY": backend.key}
    result = subprocess.run(["bash", "-c", f"{text} --silent --show-error --fail"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _poll_with_curl(backend: BackendProcess, job_id: str) -> dict[str, Any]:
    """Poll the job with the documented status curl until it ends (or 10 minutes pass)."""
    deadline = time.monotonic() + 600
    job = _curl("sft-status-curl", backend, job_id)
    while job["status"] not in {"succeeded", "failed", "cancelled"} and time.monotonic() < deadline:
        time.sleep(0.5)
        job = _curl("sft-status-curl", backend, job_id)
    return job


def test_sft_agent_loop_train_no_poll_then_poll_the_job(backend: BackendProcess, isolated_home: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    """004 §3-4 (without eval/filter): train --no-poll, poll /api/learning/jobs/<job_id> with the documented
    curl until it succeeds, read fine_tuned_model; re-running with --no-poll finds the same job."""
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    _docs_sft_workspace(isolated_home)
    config = isolated_home / "configs" / "train.toml"
    config.write_text(config.read_text() + "sequence_length = 64\n")  # the tiny model trains in seconds
    args = [*argv("sft-no-poll", replace={"…": "--config configs/train.toml --dataset ft_data/crafter_sft.jsonl"}),
            "--model", TINY_TEXT, "--backend", backend.url]
    result = run_cli("--json", *args)
    assert result.exit_code == 0, result.stdout + result.stderr
    job_id = result.json()["job_id"]
    job = _poll_with_curl(backend, job_id)
    assert job["status"] == "succeeded", job
    assert job["fine_tuned_model"]
    assert _curl("rl-status-curl", backend, job_id)["fine_tuned_model"] == job["fine_tuned_model"]
    again = run_cli(*args)
    assert again.exit_code == 0, again.stdout + again.stderr
    assert f"Same job as an earlier run of this command (id={job_id}, status=succeeded)" in again.stdout
    assert "already uploaded by an earlier run" in again.stdout and "Uploading" not in again.stdout
    with backend.client() as client:
        assert [j["id"] for j in client.get("/learning/jobs").json()["data"]] == [job_id]
        files = client.get("/files").json()
    assert len(files.get("data", files.get("files", []))) == 1


AGENT_EVAL_TOML = """[eval]
app_id = "color-quiz"
model = "synth-ai/tiny-qwen3"
seeds = "0-15"
concurrency = 4

[eval.env_config]
things = 1

[eval.policy_config]
temperature = 1.0
max_tokens = 12
"""

AGENT_FILTER_TOML = """[filter]
db = "traces/v3/synth_ai.db"
output = "ft_data/filtered.jsonl"
min_official_score = 0.2
"""


def test_agent_loop_eval_filter_train_poll_then_eval_the_model(backend: BackendProcess, isolated_home: Path,
                                                               monkeypatch: pytest.MonkeyPatch):
    """004 §4 and 000 §4 as written: `eval` (traces) -> `filter` (JSONL) -> `train --no-poll` -> poll with the
    documented curl -> `fine_tuned_model` -> `eval --model <fine_tuned_model>` and `eval --app-id … --model ft:…`.
    The bare `eval` and `filter` find their configs in the working directory; the backend comes from
    BACKEND_BASE_URL, as a user's .env would set it."""
    monkeypatch.setenv("SYNTH_API_KEY", backend.key)
    monkeypatch.setenv("BACKEND_BASE_URL", backend.url)
    _docs_sft_workspace(isolated_home)
    config = isolated_home / "configs" / "train.toml"
    config.write_text(config.read_text() + "sequence_length = 64\n")
    (isolated_home / "configs" / "eval.toml").write_text(AGENT_EVAL_TOML)
    (isolated_home / "configs" / "filter.toml").write_text(AGENT_FILTER_TOML)

    evaluated = run_cli("--json", *argv("eval"))
    assert evaluated.exit_code == 0, evaluated.stdout + evaluated.stderr
    assert evaluated.json()["summary"]["ok"] == 16
    filtered = run_cli("--json", *argv("filter"))
    assert filtered.exit_code == 0, filtered.stdout + filtered.stderr
    written = filtered.json()["examples"]["written"]
    data = isolated_home / "ft_data" / "filtered.jsonl"
    records = [json.loads(line) for line in data.read_text().splitlines()]
    assert len(records) == written > 0
    assert all(r["messages"][0]["content"] == "What color is the sky?" for r in records)
    assert run_cli("files", "validate", str(data)).exit_code == 0

    args = [*argv("sft-no-poll", replace={"…": "--config configs/train.toml --dataset ft_data/filtered.jsonl"}),
            "--model", TINY_TEXT]
    created = run_cli("--json", *args)
    assert created.exit_code == 0, created.stdout + created.stderr
    job_id = created.json()["job_id"]
    job = _poll_with_curl(backend, job_id)
    assert job["status"] == "succeeded", job
    model = job["fine_tuned_model"]
    assert model.startswith("ft:")

    by_model = run_cli("--json", *argv("eval-model", replace={"<fine_tuned_model>": model}))
    assert by_model.exit_code == 0, by_model.stdout + by_model.stderr
    by_app = run_cli("--json", *argv("eval-app", replace={"your-task-id": "color-quiz", "ft:...": model}))
    assert by_app.exit_code == 0, by_app.stdout + by_app.stderr
    assert by_model.json()["model"] == model and by_model.json()["summary"]["ok"] == 16  # the config's seeds
    # App and model on the command line make a complete run: no config is looked for, seeds default to 0-4.
    assert by_app.json()["model"] == model and by_app.json()["summary"]["ok"] == 5
    import sqlite3

    with sqlite3.connect(isolated_home / "traces" / "v3" / "synth_ai.db") as db:
        models = [json.loads(m)["model"] for (m,) in db.execute("SELECT metadata FROM session_traces")]
    assert models.count(TINY_TEXT) == 16 and models.count(model) == 21
