"""`synth-ai eval` against the bundled math app, in-process and at `--url` (a real `synth-ai serve`), with a
scripted OpenAI-compatible model server: scores, judges, seed filters, traces in SQLite, exit codes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import free_port, run_cli
from eval_support import JUDGE_FILE, answering_policy, by_seed, sessions, write_config
from taskapp_support import ENV_KEY, scripted_model, stop, subprocess_env, synth_ai_command, wait_for_health

TINY = "synth-ai/tiny-qwen3"  # a model a Synth backend has (these tests never reach one)


@pytest.fixture
def env_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    return ENV_KEY


def test_in_process_eval_scores_every_seed_and_stores_one_session_each(cli, isolated_home: Path) -> None:
    with scripted_model(answering_policy(right={0, 2})) as (model_url, model):
        config = write_config(isolated_home / "eval_math.toml", model_url)
        result = cli("--json", "eval", "--config", str(config))
        again = cli("--json", "eval", "--config", str(config), "--seeds", "5")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "seed=0" not in result.stderr  # no progress lines in JSON mode
    doc = result.json()
    assert doc["app_id"] == "math-single-step" and doc["split"] == "test" and doc["seeds"] == [0, 1, 2, 3]
    assert [(r["seed"], r["status"], r["official_score"]) for r in doc["results"]] == [
        (0, "ok", 1.0), (1, "ok", 0.0), (2, "ok", 1.0), (3, "ok", 0.0)]
    assert doc["summary"]["official_mean"] == 0.5 and doc["summary"]["correct"] == 2
    bodies = [r["body"] for r in model.requests]
    assert len(bodies) == 5 and all(b["model"] == "scripted-model" and b["temperature"] == 0.0 for b in bodies)
    db = isolated_home / "traces" / "v3" / "synth_ai.db"  # the default, under the working directory
    stored = by_seed(db)
    assert sorted(stored) == [0, 1, 2, 3, 5]  # the second run appended to the same DB
    for seed, session in stored.items():
        if seed == 5:
            continue
        meta = session["metadata"]
        assert meta["task_split"] == "test" and meta["task_id"] == f"math_single_step:test:{seed}"
        assert meta["model"] == "scripted-model" and meta["official_score"] == (1.0 if seed in (0, 2) else 0.0)
        assert meta["prompt"] and "math_submit" in meta["completion"]
        assert session["outcomes"] == [(1 if seed in (0, 2) else 0, 0)]
        assert session["messages"] == ["system", "user", "assistant"]
        assert session["events"] == ["cais", "environment"]
    assert again.exit_code == 0
    assert len(sessions(db)) == 5


def test_flags_override_the_toml_and_human_output_has_the_summary(cli, isolated_home: Path) -> None:
    with scripted_model(answering_policy(split="train")) as (model_url, model):
        config = write_config(isolated_home / "eval.toml", model_url, seeds=[0, 1, 2, 3, 4, 5])
        db = isolated_home / "custom.db"
        result = cli("eval", "--config", str(config), "--seeds", "7,8", "--split", "train", "--model", "other-model",
                     "--trace-db", str(db), "--concurrency", "1")
        nothing = cli("--json", "eval", "--config", str(config), "--seeds", "1", "--trace-db", "none")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "Eval complete: 2 ok, 0 failed; model=other-model, split=train" in result.stdout
    assert "Official mean: 1.000" in result.stdout and "math_single_step:train:7" in result.stdout
    assert [r["body"]["model"] for r in model.requests] == ["other-model", "other-model", "scripted-model"]
    assert sorted(by_seed(db)) == [7, 8]
    assert "seed=7 status=ok" in result.stderr  # per-seed lines go to stderr with the progress bar
    assert nothing.exit_code == 0 and nothing.json()["trace_db"] is None


def test_sampling_seed_gives_each_seed_its_own_model_seed_the_same_on_every_run(cli, isolated_home: Path) -> None:
    """`[eval].sampling_seed`: every rollout's model call carries a seed derived from it and the task seed, so a
    re-run samples the same tokens and no two task seeds share a random stream; an explicit policy `seed` wins."""
    policy = {"temperature": 1.0}

    def model_seeds(model: Any, config: Path) -> list[Any]:
        start = len(model.requests)
        result = cli("--json", "eval", "--config", str(config), "--trace-db", "none", "--concurrency", "1")
        assert result.exit_code == 0, result.stdout + result.stderr
        return [r["body"].get("seed") for r in model.requests[start:]]  # one call per seed, in seed order

    with scripted_model(answering_policy()) as (model_url, model):
        policy["inference_url"] = model_url
        seeded = write_config(isolated_home / "seeded.toml", model_url, sampling_seed=7, policy_config=policy)
        other = write_config(isolated_home / "other.toml", model_url, sampling_seed=8, policy_config=policy)
        plain = write_config(isolated_home / "plain.toml", model_url, policy_config=policy)
        pinned = write_config(isolated_home / "pinned.toml", model_url, sampling_seed=7,
                              policy_config={**policy, "seed": 5})
        first, again = model_seeds(model, seeded), model_seeds(model, seeded)
        shifted, unseeded, explicit = model_seeds(model, other), model_seeds(model, plain), model_seeds(model, pinned)
    assert len(first) == 4 and all(isinstance(s, int) for s in first) and len(set(first)) == 4
    assert again == first
    assert len(shifted) == 4 and not set(shifted) & set(first)
    assert unseeded == [None] * 4  # without the key the body is the reference's: no seed is sent
    assert explicit == [5] * 4


def test_judges_from_a_path_and_a_module_with_pearson_r(cli, isolated_home: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (isolated_home / "judges").mkdir()
    (isolated_home / "judges" / "score.py").write_text(JUDGE_FILE)
    pkg = isolated_home / "pkg"
    pkg.mkdir()
    (pkg / "my_judges.py").write_text(JUDGE_FILE)
    monkeypatch.syspath_prepend(str(pkg))
    with scripted_model(answering_policy(right={0, 3})) as (model_url, _):
        config = write_config(isolated_home / "eval.toml", model_url,
                              judge={"half": {"path": "judges/score.py", "scale": 2.0},
                                     "picky": {"module": "my_judges", "callable": "picky"}})
        result = cli("--json", "eval", "--config", str(config))
    assert result.exit_code == 0, result.stdout + result.stderr
    doc = result.json()
    scores = {r["seed"]: r["judge_scores"] for r in doc["results"]}
    assert scores[0] == {"half": 1.0, "picky": 1.0} and scores[2] == {"half": 0.0, "picky": 0.2}
    assert scores[1]["picky"] is None and "no opinion" in doc["results"][1]["judge_errors"]["picky"]
    judges = doc["summary"]["judges"]
    assert judges["half"]["pearson_r"] == pytest.approx(1.0) and judges["half"]["mean"] == 0.5
    assert judges["picky"]["pearson_r"] == pytest.approx(1.0) and judges["picky"]["scored"] == 3
    stored = by_seed(isolated_home / "traces" / "v3" / "synth_ai.db")
    assert stored[0]["metadata"]["judge_scores"] == {"half": 1.0, "picky": 1.0}
    broken = write_config(isolated_home / "broken.toml", "http://127.0.0.1:9/v1",
                          judge={"x": {"path": "judges/missing.py"}})
    bad = cli("--json", "eval", "--config", str(broken))
    assert bad.exit_code == 3 and "judge file not found" in bad.json()["error"]["message"]


def test_metadata_and_metadata_sql_select_seeds(cli, isolated_home: Path) -> None:
    with scripted_model(answering_policy(split="train")) as (model_url, model):
        config = write_config(isolated_home / "eval.toml", model_url, seeds="0-9", split="train")
        sql = cli("--json", "eval", "--config", str(config), "--metadata-sql",
                  "SELECT seed FROM tasks WHERE problem LIKE 'Compute%' AND seed < 8")
        exact = cli("--json", "eval", "--config", str(config), "--metadata", "index=4")
        none = cli("--json", "eval", "--config", str(config), "--metadata", "index=999")
        broken = cli("--json", "eval", "--config", str(config), "--metadata-sql", "SELECT nope FROM")
        malformed = cli("--json", "eval", "--config", str(config), "--metadata", "no-equals-sign")
    from eval_support import math_rows

    rows = math_rows("train")
    expected = [s for s in range(8) if rows[s]["problem"].startswith("Compute")]
    assert expected and len(expected) < 8
    assert sql.exit_code == 0, sql.stdout + sql.stderr
    assert sql.json()["seeds"] == expected
    assert exact.exit_code == 0 and exact.json()["seeds"] == [4]
    assert none.exit_code == 3 and "No seeds match" in none.json()["error"]["message"]
    assert broken.exit_code == 3 and "Failed to execute metadata SQL query" in broken.json()["error"]["message"]
    assert "problem" in broken.json()["error"]["hint"]
    assert malformed.exit_code == 3 and "must be key=value" in malformed.json()["error"]["message"]
    assert len(model.requests) == len(expected) + 1


def test_eval_at_url_against_synth_ai_serve(cli, isolated_home: Path, env_key: str, tmp_path: Path) -> None:
    port = free_port()
    env = subprocess_env(ENVIRONMENT_API_KEY=env_key)
    process = subprocess.Popen([*synth_ai_command(), "serve", "math-single-step", "--host", "127.0.0.1",
                                "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, process=process)
        with scripted_model(answering_policy()) as (model_url, _):
            config = write_config(isolated_home / "eval.toml", model_url, task_app_url=url)
            from_toml = cli("--json", "eval", "--config", str(config))
            (isolated_home / "wrong.env").write_text("ENVIRONMENT_API_KEY=wrong-key-0123456789\n")
            from_flag = cli("--json", "eval", "--config", str(config), "--url", url, "--seeds", "0")
    finally:
        stop(process)
    assert from_toml.exit_code == 0, from_toml.stdout + from_toml.stderr
    assert from_toml.json()["task_app"] == url
    assert [r["official_score"] for r in from_toml.json()["results"]] == [1.0] * 4
    assert from_flag.exit_code == 0
    assert len(sessions(isolated_home / "traces" / "v3" / "synth_ai.db")) == 5


def _serve_math_app(folder: Path) -> tuple[subprocess.Popen, str]:
    """`synth-ai serve math-single-step` as a real process on a free port, with the tests' key."""
    port = free_port()
    process = subprocess.Popen([*synth_ai_command(), "serve", "math-single-step", "--host", "127.0.0.1",
                                "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, text=True, env=subprocess_env(ENVIRONMENT_API_KEY=ENV_KEY),
                               cwd=folder)
    return process, f"http://127.0.0.1:{port}"


def test_wrong_key_or_dead_url_stops_before_any_rollout(cli, isolated_home: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    process, url = _serve_math_app(tmp_path)
    try:
        wait_for_health(url, process=process)
        monkeypatch.setenv("ENVIRONMENT_API_KEY", "wrong-key-0123456789")
        result = cli("--json", "eval", "math-single-step", "--url", url, "--model", TINY, "--seeds", "0,1",
                     "--backend", "http://127.0.0.1:9")
        monkeypatch.delenv("ENVIRONMENT_API_KEY")
        unset = cli("--json", "eval", "math-single-step", "--url", url, "--model", TINY, "--seeds", "0")
    finally:
        stop(process)
    assert result.exit_code == 4, result.stdout + result.stderr
    assert "refused ENVIRONMENT_API_KEY" in result.json()["error"]["message"]
    assert "wrong-key-0123456789" not in result.stdout
    assert unset.exit_code == 4 and "ENVIRONMENT_API_KEY" in unset.json()["error"]["message"]
    dead = cli("--json", "eval", "math-single-step", "--url", url, "--model", TINY, "--seeds", "0",
               "--env-file", str(_env_file(isolated_home)))  # the server is stopped now
    assert dead.exit_code == 5 and "Cannot reach the task app" in dead.json()["error"]["message"]
    assert not (isolated_home / "traces").exists()


def _env_file(folder: Path) -> Path:
    path = folder / "app.env"
    path.write_text(f"ENVIRONMENT_API_KEY={ENV_KEY}\n")
    return path


@pytest.mark.parametrize("args, code, text", [
    (["--seeds", "1,x"], 3, "Unable to parse seeds"),
    (["--config", "missing.toml"], 8, "Eval config not found"),
    (["--concurrency", "0"], 2, "'--concurrency': 0 is not in the range x>=1"),
    (["--url", "ftp://x"], 3, "must start with http"),
    (["no-such-app"], 8, "Task app 'no-such-app' not found"),
])
def test_bad_input_is_reported_with_its_exit_code(cli, args, code, text) -> None:
    result = cli("--json", "eval", "--model", TINY, *(args if args[0].startswith("-") and "--url" not in args
                                                     else args), *([] if any(a in args for a in ("--url",))
                                                                   or not args[0].startswith("-") else
                                                                   ["math-single-step"]))
    assert result.exit_code == code, result.stdout + result.stderr
    assert text in result.json()["error"]["message"]


VISION_APP = '''
from synth_ai.taskapp import (RolloutMetrics, RolloutResponse, RolloutStep, RolloutTrajectory, TaskAppConfig,
                              TaskAppEntry, TaskInfo, chat_completion, current_trace, register_task_app)

PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

async def rollout(request, fastapi_request=None):
    config = request.policy.config
    trace = current_trace()
    if trace is not None:
        trace.timestep("look", turn_number=0)
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PIXEL}},
                                             {"type": "text", "text": "What colour is this pixel?"}]}]
    reply = await chat_completion(config["inference_url"], {"model": config["model"], "messages": messages})
    text = reply["choices"][0]["message"]["content"] or ""
    reward = 1.0 if "red" in text else 0.0
    step = RolloutStep(obs={"task_id": "pixel"}, tool_calls=[], reward=reward, done=True)
    return RolloutResponse(run_id=request.run_id, trajectories=[RolloutTrajectory(
        env_id="pixel", policy_id="p", steps=[step], length=1, inference_url=config["inference_url"])],
        metrics=RolloutMetrics(episode_returns=[reward], mean_return=reward, num_steps=1, num_episodes=1,
                               outcome_score=reward))

def build():
    return TaskAppConfig(app_id="pixel-app", name="Pixel", description="one image",
                         base_task_info=TaskInfo(task={"id": "pixel", "name": "Pixel"}, environment="pixel"),
                         describe_taskset=lambda: {"id": "pixel"}, provide_task_instances=lambda s: [],
                         rollout=rollout)

register_task_app(entry=TaskAppEntry(app_id="pixel-app", description="one image", config_factory=build))
'''


def test_multimodal_messages_are_stored_with_their_images(cli, isolated_home: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from taskapp_support import completion

    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "pixel_task_app.py").write_text(VISION_APP)
    monkeypatch.setenv("SYNTH_TASK_APP_SEARCH_PATH", str(apps))
    db = isolated_home / "vision.db"
    with scripted_model(lambda body: completion("It is red.")) as (model_url, model):
        result = cli("--json", "eval", "pixel-app", "--model", "vision-model", "--seeds", "0,1",
                     "--trace-db", str(db), "--config", str(write_config(
                         isolated_home / "eval.toml", model_url, app_id="pixel-app", seeds=[0, 1])))
    assert result.exit_code == 0, result.stdout + result.stderr
    assert [r["official_score"] for r in result.json()["results"]] == [1.0, 1.0]
    sent = model.requests[0]["body"]["messages"][0]["content"]
    for session in sessions(db):
        assert session["messages"] == ["user", "assistant"]
        user = json.loads(session["contents"][0])
        assert user["content"] == sent  # the image part is kept, byte for byte
        assert user["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
        assert json.loads(session["contents"][1])["content"] == "It is red."
        assert session["metadata"]["prompt"] == "What colour is this pixel?"


def test_config_is_discovered_under_the_working_directory(cli, isolated_home: Path) -> None:
    (isolated_home / "configs").mkdir()
    (isolated_home / "other.toml").write_text('[filter]\ndb = "x.db"\noutput = "o.jsonl"\n')
    with scripted_model(answering_policy()) as (model_url, _):
        write_config(isolated_home / "configs" / "eval_math.toml", model_url, seeds=[2])
        result = cli("--json", "eval")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "Using eval config: configs/eval_math.toml" in result.stderr
    assert result.json()["seeds"] == [2] and result.json()["results"][0]["official_score"] == 1.0


def test_a_whole_file_config_without_an_eval_table(cli, isolated_home: Path) -> None:
    with scripted_model(answering_policy(split="train")) as (model_url, _):
        config = isolated_home / "flat.toml"
        config.write_text(f'app_id = "math"\nmodel = "flat-model"\nseeds = [1, 2]\n'
                          f'inference_url = "{model_url}"\nmax_llm_calls = 1\n')
        result = cli("--json", "eval", "--config", str(config), "--trace-db", "off")
    assert result.exit_code == 0, result.stdout + result.stderr
    doc = result.json()
    assert doc["model"] == "flat-model" and doc["app_id"] == "math-single-step" and doc["split"] == "train"
    assert [r["official_score"] for r in doc["results"]] == [1.0, 1.0]


def test_a_trace_db_that_cannot_be_opened_is_an_input_error(cli, isolated_home: Path) -> None:
    folder = isolated_home / "a-folder.db"
    folder.mkdir()
    with scripted_model(answering_policy()) as (model_url, model):
        config = write_config(isolated_home / "eval.toml", model_url, seeds=[0])
        result = cli("--json", "eval", "--config", str(config), "--trace-db", str(folder))
    assert result.exit_code == 3, result.stdout + result.stderr
    assert "Cannot open the trace database" in result.json()["error"]["message"]
    assert model.requests == []  # nothing ran


def test_a_misspelt_model_stops_before_any_rollout_with_trains_message(cli, isolated_home: Path,
                                                                        tmp_path: Path) -> None:
    """`--model synth-ai/tiny-qwen4` ran every seed into a cut-off 502 (exit 11); now it stops at once, with the
    message and closest ids `train` gives (exit 3), whether the model comes from the flag or the config."""
    process, url = _serve_math_app(tmp_path)
    config = isolated_home / "eval.toml"
    config.write_text('[eval]\napp_id = "math-single-step"\nmodel = "synth-ai/tiny-qwen4"\nseeds = [0, 1]\n')
    try:
        wait_for_health(url, process=process)
        flag = cli("--json", "eval", "math-single-step", "--url", url, "--model", "synth-ai/tiny-qwen4",
                   "--seeds", "0-3", "--env-file", str(_env_file(isolated_home)))
        from_config = cli("eval", "--config", str(config), "--url", url, "--env-file", str(_env_file(isolated_home)))
    finally:
        stop(process)
    trained = run_cli("--json", "train", "--type", "rl", "--dry-run", "--config",
                      str(Path(__file__).parents[1] / "examples" / "configs" / "rl_tiny_local.toml"),
                      "--model", "synth-ai/tiny-qwen4")
    assert flag.exit_code == 3, flag.stdout + flag.stderr
    error = flag.json()["error"]
    assert error["message"] == "Model 'synth-ai/tiny-qwen4' is not supported."
    assert error["hint"].startswith("Did you mean: synth-ai/tiny-qwen3")
    assert trained.exit_code == 3
    (issue,) = trained.json()["error"]["details"]["issues"]
    assert issue["message"] == error["message"] and issue["fix"] == error["hint"]  # train's words, once
    assert from_config.exit_code == 3
    assert "eval.toml:3: [eval].model: Model 'synth-ai/tiny-qwen4' is not supported." in from_config.stderr
    assert "Did you mean: synth-ai/tiny-qwen3" in from_config.stderr
    # nothing ran: no trace store was opened, and no embedded backend was started to serve the model
    data_dir = Path(os.environ["SYNTH_AI_HOME"])
    assert not (isolated_home / "traces").exists() and not (data_dir / "backend").exists()


def test_a_model_at_the_configs_own_endpoint_may_be_any_id(cli, isolated_home: Path) -> None:
    with scripted_model(answering_policy()) as (model_url, model):
        config = write_config(isolated_home / "eval.toml", model_url, seeds=[0])
        result = cli("--json", "eval", "--config", str(config), "--model", "gpt-4o-mini-typo", "--trace-db", "none")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert [r["body"]["model"] for r in model.requests] == ["gpt-4o-mini-typo"]


def test_app_id_option_is_the_docs_spelling_of_the_argument():
    """The product docs write `synth-ai eval --app-id ID`; it names the same app as the APP_ID argument, and two
    different apps are a usage error."""
    clash = run_cli("eval", "math-single-step", "--app-id", "color-quiz", "--model", "m")
    assert clash.exit_code == 2 and "--app-id" in clash.stderr
    unknown = run_cli("eval", "--app-id", "no-such-app", "--model", "synth-ai/tiny-qwen3")
    assert unknown.exit_code == 8 and "no-such-app" in unknown.stderr


@pytest.mark.parametrize("model", ["ft:head64-qwen3:job-x", "rl:my-local-base:rljob-y", "imported:my-adapter",
                                   "tinker://sess_1:train:0/weights/step-10"])
def test_a_trained_models_id_is_the_backends_to_check_not_the_registrys(isolated_home: Path, model: str) -> None:
    """A fine-tuned or imported id may continue a model no registry lists (one the embedded backend built or
    imported): eval leaves it to the backend, as train does, while a base id's typo still stops at the config."""
    from synth_ai.config.loader import load_config
    from synth_ai.errors import ConfigError

    config = isolated_home / "eval.toml"
    config.write_text(f'[eval]\napp_id = "math-single-step"\nmodel = "{model}"\nseeds = [0]\n')
    assert load_config(config, "eval").resolved["model"] == model
    config.write_text('[eval]\napp_id = "math-single-step"\nmodel = "synth-ai/tiny-qwen4"\nseeds = [0]\n')
    with pytest.raises(ConfigError):
        load_config(config, "eval")
