"""`synth-ai deploy` (Modal runtime) and `synth-ai modal-serve`.

There is no Modal account or network here, so Modal is exercised as far as it runs offline: the generated app is
imported and inspected (`app.registered_functions`, the function spec), its ASGI factory runs through `.local()`
and serves a real crafter rollout over httpx's ASGI transport, and the real `modal` CLI is run up to where it
needs a token. The success path (URL read and saved) runs against a stand-in `modal` executable that prints
what Modal prints, because the real one cannot deploy without an account.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest
from taskapp_support import (
    ENV_KEY,
    completion,
    generated_app_probe,
    scripted_model,
    tool_call,
)

from synth_ai.bundled_apps import APPS_DIR
from synth_ai.deploy.modal_cli import raise_for_failure, run_modal, url_from_line
from synth_ai.env.extras import pip_install
from synth_ai.errors import DeadlineError, ExitCode, ServerError

pytest.importorskip("modal")

SECRET = "sk_env_DO_NOT_PRINT_0123456789abcdef"
OPENAI_SECRET = "sk-openai-DO-NOT-PRINT-0123456789"


def write_env(path: Path, text: str = "") -> Path:
    path.write_text(f"# deploy settings\nENVIRONMENT_API_KEY={SECRET}\nOTHER=keep me\n{text}")
    return path


def load_script(path: str | Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"generated_modal_{time.monotonic_ns()}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dry_run(cli, *args: str) -> dict[str, Any]:
    result = cli("--json", "deploy", "crafter", "--dry-run", *args)
    assert result.exit_code == 0, result.stdout + result.stderr
    return result.json()


# ----- the generated Modal app ----------------------------------------------------------------------------------


def test_dry_run_prints_source_and_command_without_secrets(cli, isolated_home: Path, monkeypatch) -> None:
    env = write_env(isolated_home / ".env")
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)  # only in the shell: attached by name
    result = cli("deploy", "crafter", "--dry-run", "--name", "my-crafter", "--env-file", str(env))
    assert result.exit_code == 0, result.stderr
    out = result.stdout + result.stderr
    assert SECRET not in out and OPENAI_SECRET not in out
    script = Path(os.environ["SYNTH_AI_HOME"]) / "modal" / "my-crafter_modal.py"
    source = script.read_text()
    assert SECRET not in source and OPENAI_SECRET not in source
    assert source in result.stdout  # the whole generated app is shown
    dry = [line for line in result.stdout.splitlines() if line.startswith("Dry run: ")]
    assert len(dry) == 1
    assert dry[0].endswith(f"deploy {script} --name my-crafter")
    assert "APP_NAME = 'my-crafter'" in source and "TASK_APP_ID = 'grpo-crafter-task-app'" in source
    assert f"modal.Secret.from_dotenv({str(env.parent)!r}, filename='.env')" in source
    assert "modal.Secret.from_local_environ(['OPENAI_API_KEY'])" in source
    assert "synth-ai==" not in source  # this package goes in as a local directory
    import synth_ai

    assert f".add_local_dir({str(Path(synth_ai.__file__).parent)!r}, remote_path='/opt/synth_ai/synth_ai'" in source
    assert "'crafter>=1.8'" in source and "'**/.env'" in source


def test_generated_app_construction_and_local_asgi_rollout(cli, isolated_home: Path, monkeypatch) -> None:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    doc = dry_run(cli)
    assert doc["dry_run"] is True and doc["app_name"] == "grpo-crafter-task-app"
    assert doc["command"][-4:] == ["deploy", doc["script_path"], "--name", "grpo-crafter-task-app"]
    assert doc["environ_secret_names"] == ["ENVIRONMENT_API_KEY"]

    module = load_script(doc["script_path"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # registered_functions is deprecated (still the way to list them)
        functions = module.app.registered_functions
    assert list(functions) == ["fastapi_app"]
    spec = functions["fastapi_app"]._spec_
    assert (spec.cpu, spec.memory) == (4.0, 4096)
    assert len(spec.secrets) == 1  # ENVIRONMENT_API_KEY from this process, by name
    assert module.app.name == "grpo-crafter-task-app"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        asgi = functions["fastapi_app"].local()  # the container's factory, run here

    def policy(body: dict[str, Any]) -> dict[str, Any]:
        return completion(None, [tool_call("interact_many", {"actions": ["move_left", "do"]})])

    async def drive(base: str) -> tuple[httpx.Response, ...]:
        transport = httpx.ASGITransport(app=asgi)
        async with httpx.AsyncClient(transport=transport, base_url="http://modal.local", timeout=60) as client:
            root = await client.get("/")
            unauthorised = await client.get("/health")
            health = await client.get("/health", headers={"X-API-Key": ENV_KEY})
            rollout = await client.post("/rollout", headers={"X-API-Key": ENV_KEY}, json={
                "run_id": "modal-local", "env": {"seed": 1, "config": {"area": [32, 32]}},
                "policy": {"config": {"model": "m", "inference_url": f"{base}?cid=c9", "max_turns": 1}},
                "ops": ["agent", "env"], "mode": "rl"})
            return root, unauthorised, health, rollout

    with scripted_model(policy) as (base, _model):
        root, unauthorised, health, rollout = asyncio.run(drive(base))
    assert root.json() == {"status": "ok", "service": "grpo-crafter-task-app"}
    assert unauthorised.status_code == 400 and health.status_code == 200
    assert rollout.status_code == 200, rollout.text
    step = rollout.json()["trajectories"][0]["steps"][0]
    assert step["info"]["meta"]["inference_url"] == f"{base}/chat/completions?cid=c9"


def test_modal_settings_render_secrets_volumes_and_limits(tmp_path: Path) -> None:
    from synth_ai.deploy.modal_script import plan_for_entry, render_modal_script
    from synth_ai.taskapp.config import ModalDeploymentConfig, TaskAppEntry

    app_file = tmp_path / "app" / "my_task_app.py"
    app_file.parent.mkdir()
    app_file.write_text("# the app\n")
    extra = tmp_path / "assets"
    extra.mkdir()
    entry = TaskAppEntry(app_id="demo", description="d", config_factory=lambda: None, modal=ModalDeploymentConfig(
        app_name="demo-app", python_version="3.12", pip_packages=("numpy",), apt_packages=("git",),
        extra_local_dirs=((str(extra), "/opt/assets"), (str(tmp_path / "missing"), "/opt/x")),
        secret_names=("groq-api-key",), volume_mounts=(("demo-vol", "/data"),), timeout=120, memory=1024,
        cpu=1.5, min_containers=0, max_containers=2))
    plan = plan_for_entry(entry, module_path=app_file)
    assert plan.warnings and "missing" in plan.warnings[0]
    path = tmp_path / "demo_modal.py"
    path.write_text(render_modal_script(plan))
    source = path.read_text()
    for text in ("debian_slim(python_version='3.12')", ".apt_install('git')", "'numpy',",
                 f"add_local_dir({str(extra)!r}, remote_path='/opt/assets'",
                 "remote_path='/opt/synth_ai/task_app/app'", "TASK_APP_MODULE = '/opt/synth_ai/task_app/app/my_task_app.py'",
                 "timeout=120,", "min_containers=0,", "max_containers=2,"):
        assert text in source, text
    module = load_script(path)
    spec = module.fastapi_app._spec_
    assert (spec.cpu, spec.memory) == (1.5, 1024)
    assert list(spec.volumes) == ["/data"] and len(spec.secrets) == 1

    with pytest.raises(ValueError, match="not valid"):
        plan_for_entry(entry, module_path=app_file, name="bad name!")


# ----- flags and errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--host", "0.0.0.0", "--port", "9000"], "--host, --port cannot be used with --runtime=modal."),
    (["--no-reload"], "--reload/--no-reload cannot be used with --runtime=modal."),
    (["--runtime", "modal", "--trace", "t", "--force"], "--force/--no-force, --trace cannot be used with --runtime=modal."),
    (["--runtime", "uvicorn", "--name", "x", "--modal-cli", "modal"],
     "--name, --modal-cli cannot be used with --runtime=uvicorn."),
    (["--runtime", "uvicorn", "--modal-mode", "deploy"], "--modal-mode cannot be used with --runtime=uvicorn."),
    (["--modal-mode", "serve", "--dry-run"], "--dry-run is not supported with --modal-mode=serve."),
])
def test_runtime_flags_are_mutually_exclusive(cli, args: list[str], message: str) -> None:
    result = cli("deploy", "crafter", *args)
    assert result.exit_code == ExitCode.USAGE
    assert message in result.stderr


def test_unknown_app_and_app_without_modal_settings(cli, tmp_path: Path, monkeypatch) -> None:
    unknown = cli("deploy", "no-such-app", "--dry-run")
    assert unknown.exit_code == ExitCode.NOT_FOUND
    assert "Task app 'no-such-app' not found" in unknown.stderr and "grpo-crafter-task-app" in unknown.stderr

    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "plain_task_app.py").write_text(textwrap.dedent('''
        from synth_ai.taskapp import TaskAppConfig, TaskAppEntry, TaskInfo, register_task_app

        def build():
            return TaskAppConfig(app_id="plain-app", name="P", description="p",
                                 base_task_info=TaskInfo(task={"id": "p", "name": "P"}, environment="p"),
                                 describe_taskset=lambda: {}, provide_task_instances=lambda s: [],
                                 rollout=lambda r, q: None)

        register_task_app(entry=TaskAppEntry(app_id="plain-app", description="no modal", config_factory=build))
    '''))
    monkeypatch.setenv("SYNTH_TASK_APP_SEARCH_PATH", str(apps))
    plain = cli("deploy", "plain-app", "--dry-run")
    assert plain.exit_code == ExitCode.INVALID_INPUT
    assert "does not define Modal deployment settings" in plain.stderr


def test_missing_env_file_and_missing_environment_key(cli, isolated_home: Path) -> None:
    missing = cli("deploy", "crafter", "--env-file", str(isolated_home / "nope.env"))
    assert missing.exit_code == ExitCode.INVALID_INPUT and "Env file not found" in missing.stderr
    no_key = cli("deploy", "crafter", "--modal-cli", "/nonexistent")
    assert no_key.exit_code == ExitCode.AUTH and "ENVIRONMENT_API_KEY is not set" in no_key.stderr


def test_missing_modal_cli(cli, isolated_home: Path) -> None:
    write_env(isolated_home / ".env")
    result = cli("deploy", "crafter", "--modal-cli", "/nonexistent")
    assert result.exit_code == ExitCode.UNAVAILABLE
    assert "Modal CLI not found: /nonexistent" in result.stderr and "--modal-cli" in result.stderr
    served = cli("modal-serve", "crafter", "--modal-cli", "no-such-modal-binary")
    assert served.exit_code == ExitCode.UNAVAILABLE and "no 'no-such-modal-binary' on PATH" in served.stderr


def test_missing_modal_token_with_the_real_cli(cli, isolated_home: Path, monkeypatch) -> None:
    """No MODAL_TOKEN_* and an empty HOME: the real `modal` stops at once with "Token missing"."""
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_SERVER_URL", "MODAL_CONFIG_PATH", "MODAL_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    write_env(isolated_home / ".env")
    venv_modal = Path(sys.executable).parent / "modal"
    cli_args = ["--modal-cli", str(venv_modal)] if venv_modal.exists() else []
    result = cli("deploy", "crafter", *cli_args, "--timeout", "60")  # the deadline guards against a hang
    assert result.exit_code == ExitCode.AUTH, result.stdout + result.stderr
    assert "Modal could not authenticate" in result.stderr and "modal token new" in result.stderr
    assert SECRET not in result.stdout + result.stderr


# ----- running the CLI: deadline, failure, URL ---------------------------------------------------------------------


def fake_modal(tmp_path: Path, body: str) -> Path:
    """A stand-in `modal` executable (Python) that records its argv and prints what Modal prints."""
    exe = tmp_path / "bin" / "modal"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(f"#!{sys.executable}\nimport json, os, sys, time\n"
                   f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
                   + textwrap.dedent(body))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


URL = "https://me--grpo-crafter-task-app-fastapi-app.modal.run"


def test_deploy_saves_url_to_env_file(cli, isolated_home: Path, tmp_path: Path) -> None:
    env = write_env(isolated_home / ".env", "TASK_APP_URL=http://old.example\n")
    before = env.read_text()
    exe = fake_modal(tmp_path, f'''
        assert os.environ["ENVIRONMENT_API_KEY"]  # the env file's values reach Modal
        print("✓ Created objects.")
        print("├── 🔨 Created web function fastapi_app => {URL}")
        print("✓ App deployed in 2.1s! 🎉")
    ''')
    result = cli("deploy", "crafter", "--modal-cli", str(exe), "--timeout", "60")
    assert result.exit_code == 0, result.stdout + result.stderr
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[0] == "deploy" and argv[1].endswith("grpo-crafter-task-app_modal.py")
    assert argv[2:] == ["--name", "grpo-crafter-task-app"]
    after = env.read_text()
    assert after == before.replace("TASK_APP_URL=http://old.example", f"TASK_APP_URL={URL}")
    assert f"Wrote TASK_APP_URL={URL}" in result.stdout and "replaced http://old.example" in result.stdout
    assert SECRET not in result.stdout + result.stderr


def test_deploy_shares_the_key_with_the_running_backend_after_success(cli, isolated_home: Path, tmp_path: Path) -> None:
    """After Modal reports success, the app's key goes (sealed) to the embedded backend running on this machine;
    `--dry-run` sends nothing."""
    from backend_support import BackendProcess

    write_env(isolated_home / ".env")
    exe = fake_modal(tmp_path, f'print("├── 🔨 Created web function fastapi_app => {URL}")\n')
    data_dir = Path(os.environ["SYNTH_AI_HOME"])
    backend = BackendProcess(data_dir).start()
    try:
        dry = cli("deploy", "crafter", "--dry-run", "--modal-cli", str(exe))
        assert dry.exit_code == 0 and "[preflight]" not in dry.stdout + dry.stderr
        assert not (data_dir / "env_keys.json").exists()
        result = cli("--json", "deploy", "crafter", "--modal-cli", str(exe), "--timeout", "60")
    finally:
        backend.stop()
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.json()["env_key_shared"] == "uploaded"
    stored = json.loads((data_dir / "env_keys.json").read_text())["keys"]
    assert [e["key"] for e in stored] == [SECRET] and stored[0]["source"] == "upload"
    assert SECRET not in result.stdout + result.stderr + backend.log()


def test_modal_serve_saves_url_and_reports_failures(cli, isolated_home: Path, tmp_path: Path) -> None:
    env = write_env(isolated_home / ".env")
    exe = fake_modal(tmp_path, f'''
        print("⚡️ Serving... hit Ctrl-C to stop!")
        print("└── Watching for changes; web function fastapi_app => {URL.replace('.modal.run', '-dev.modal.run')}")
    ''')
    result = cli("modal-serve", "crafter", "--modal-cli", str(exe))
    assert result.exit_code == 0, result.stdout + result.stderr
    assert json.loads((tmp_path / "argv.json").read_text())[0] == "serve"
    assert "[modal-serve] requested app_id=crafter" in result.stdout
    assert f"TASK_APP_URL={URL.replace('.modal.run', '-dev.modal.run')}" in env.read_text()

    failing = fake_modal(tmp_path, 'print("Image build failed: pip exited 1")\nsys.exit(3)\n')
    failed = cli("deploy", "crafter", "--modal-cli", str(failing))
    assert failed.exit_code == ExitCode.SERVER
    assert "Modal deploy exited with status 3" in failed.stderr


def test_run_modal_deadline_stops_the_process() -> None:
    argv = [sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(300)"]
    lines: list[str] = []
    with pytest.raises(DeadlineError) as info:
        run_modal(argv, env=os.environ, timeout_s=1.0, on_line=lines.append)
    assert info.value.exit_code == ExitCode.TIMEOUT
    with pytest.raises(ProcessLookupError):  # stopped and reaped, not left running
        os.kill(int(lines[0]), 0)


def test_url_line_parsing_and_failure_classes() -> None:
    assert url_from_line(f"├── 🔨 Created web function fastapi_app => {URL}") == URL
    assert url_from_line(f"web function => {URL}.") == URL
    assert url_from_line("see https://modal.com/docs for help") is None
    from synth_ai.deploy.modal_cli import RunResult

    with pytest.raises(ServerError):
        raise_for_failure(RunResult(2, ["Traceback ...", "ValueError: bad"]), command="deploy")
    raise_for_failure(RunResult(0, []), command="deploy")


def test_generated_app_runs_from_the_container_layout(cli, tmp_path: Path, monkeypatch) -> None:
    """Copy the mounted directories to where the image puts them (under a stand-in for /opt/synth_ai) and run the
    ASGI factory in a fresh interpreter: `synth_ai` and the app must load from those copies alone."""
    import shutil

    import synth_ai

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    doc = dry_run(cli)
    root = tmp_path / "opt" / "synth_ai"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".env", "*.env", "*.db")
    shutil.copytree(Path(synth_ai.__file__).parent, root / "synth_ai", ignore=ignore)
    crafter_dir = APPS_DIR / "crafter"
    shutil.copytree(crafter_dir, root / "task_app" / "crafter", ignore=ignore)
    source = Path(doc["script_path"]).read_text()
    source = source.replace("REMOTE_ROOT = '/opt/synth_ai'", f"REMOTE_ROOT = {str(root)!r}")
    source = source.replace("'/opt/synth_ai/task_app/crafter/task_app.py'",
                            repr(str(root / "task_app" / "crafter" / "task_app.py")))
    script = tmp_path / "container_modal.py"
    script.write_text(source)
    probe = generated_app_probe(script) + textwrap.dedent(f'''
        import asyncio, json
        import httpx, synth_ai
        async def main():
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://c") as client:
                info = await client.get("/task_info", params={{"seed": 2}}, headers={{"X-API-Key": {ENV_KEY!r}}})
            return info.json()
        info = asyncio.run(main())
        crafter_module = next(m for m in list(sys.modules.values())
                              if getattr(m, "APP_ID", None) == "grpo-crafter-task-app")
        print(json.dumps({{"synth_ai": synth_ai.__file__, "app": crafter_module.__file__,
                          "seed": info["dataset"]["seed"]}}))
    ''')
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["synth_ai"].startswith(str(root / "synth_ai"))
    assert found["app"].startswith(str(root / "task_app" / "crafter")) and found["seed"] == 2


def test_modal_command_resolution(tmp_path: Path, monkeypatch) -> None:
    from synth_ai.deploy import modal_cli
    from synth_ai.errors import UnavailableError

    exe = fake_modal(tmp_path, "")
    monkeypatch.setenv("PATH", str(exe.parent))
    assert modal_cli.resolve_modal_command(None) == [str(exe)]  # `modal` on PATH first
    assert modal_cli.resolve_modal_command(str(exe)) == [str(exe)]
    monkeypatch.setenv("SYNTH_FORCE_MODAL_WRAPPER", "1")
    assert modal_cli.resolve_modal_command(None) == [sys.executable, "-m", "modal"]
    monkeypatch.delenv("SYNTH_FORCE_MODAL_WRAPPER")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert modal_cli.resolve_modal_command("modal") == [sys.executable, "-m", "modal"]
    # No `modal` anywhere: the package is absent too (simulated; it is installed here).
    monkeypatch.setattr(modal_cli.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UnavailableError, match="the `modal` package is not installed") as info:
        modal_cli.resolve_modal_command("modal")
    assert info.value.exit_code == ExitCode.UNAVAILABLE and pip_install("modal") in info.value.hint


def test_env_files_of_every_common_name_stay_out_of_the_image() -> None:
    file_pattern_matcher = pytest.importorskip("modal.file_pattern_matcher")
    from synth_ai.deploy.modal_script import MOUNT_IGNORE

    ignored = file_pattern_matcher.FilePatternMatcher(*MOUNT_IGNORE)
    for name in (".env", "app/.env", ".env.local", "app/.env.production", "prod.env", "traces/synth_ai.db"):
        assert ignored(Path(name)), name
    for name in ("task_app.py", "environment.py", "data/train.jsonl"):
        assert not ignored(Path(name)), name
