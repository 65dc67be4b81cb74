"""`synth-ai deploy verifiers:<target>` to Modal, offline: the generated Modal app (pip packages, what is copied
into the image, the environment variables, the app id) and what its container does with it.

The container side copies every directory the generated app mounts to where the image puts it (a stand-in for
/opt/synth_ai), points the app at those copies and runs its web function through Modal's `.local()` in a fresh
interpreter whose working directory does not hold the environment: the app id names a relative path that does not
resolve there, so the environment must load from the copy, with the env args the script sets, and answer
`/task_info` through its lifespan (verifiers' serving resources started and stopped).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from taskapp_support import ENV_KEY, generated_app_probe

pytest.importorskip("modal")
pytest.importorskip("verifiers.v1")

REPO = Path(__file__).resolve().parents[1]
ENVS = REPO / "tests" / "verifiers_envs"
REMOTE_ROOT = "/opt/synth_ai"
_MOUNT = re.compile(r"\.add_local_dir\('([^']+)', remote_path='([^']+)'")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".env", "*.env", "*.db")


def dry_run(cli, isolated_home: Path, monkeypatch, spec: str) -> dict[str, Any]:
    """`deploy verifiers:<spec> --dry-run` from the repository root (so `spec` may be relative to it)."""
    env_file = isolated_home / "deploy.env"
    env_file.write_text(f"ENVIRONMENT_API_KEY={ENV_KEY}\n")
    monkeypatch.chdir(REPO)
    # resolving a local target puts its directory on sys.path and PYTHONPATH: undone after the test
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    result = cli("--json", "deploy", f"verifiers:{spec}", "--dry-run", "--env-file", str(env_file))
    assert result.exit_code == 0, result.stdout + result.stderr
    return result.json()


def load_script(path: str | Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"generated_vf_modal_{time.monotonic_ns()}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_file_module_script_installs_verifiers_copies_its_directory_and_sets_env_args(
        cli, isolated_home: Path, monkeypatch) -> None:
    monkeypatch.setenv("SYNTH_VERIFIERS_ENV_ARGS", '{"split":"test"}')
    doc = dry_run(cli, isolated_home, monkeypatch, "tests/verifiers_envs/qa_env.py")
    source = doc["source"]
    assert doc["app_name"] == "synth-vf-qa_env" and doc["command"][-2:] == ["--name", "synth-vf-qa_env"]
    assert "TASK_APP_ID = 'verifiers:tests/verifiers_envs/qa_env.py'" in source
    assert "        'verifiers==0.4.0',\n" in source and "        'uv>=0.5',\n" in source
    # the module's directory (its siblings may be imported), under its own name
    assert f".add_local_dir({str(ENVS)!r}, remote_path='/opt/synth_ai/task_app/verifiers_envs'" in source
    assert "TASK_APP_MODULE = '/opt/synth_ai/task_app/verifiers_envs/qa_env.py'" in source
    assert "ENVIRONMENT = {'SYNTH_VERIFIERS_ENV_ARGS': '{\"split\": \"test\"}'}" in source
    assert "    os.environ.update(ENVIRONMENT)\n" in source
    body = source[source.index("def fastapi_app():"):]
    assert body.index("os.environ.update(ENVIRONMENT)") < body.index("task_app_asgi(")  # set before the app loads

    module = load_script(doc["script_path"])
    assert module.ENVIRONMENT == {"SYNTH_VERIFIERS_ENV_ARGS": '{"split": "test"}'}
    assert module.app.name == "synth-vf-qa_env"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert list(module.app.registered_functions) == ["fastapi_app"]


def test_package_script_copies_the_package_itself_and_sets_no_env_args(cli, isolated_home: Path, monkeypatch) -> None:
    doc = dry_run(cli, isolated_home, monkeypatch, "tests/verifiers_envs/calc_env")
    source = doc["source"]
    assert "TASK_APP_ID = 'verifiers:tests/verifiers_envs/calc_env'" in source
    assert "        'verifiers==0.4.0',\n" in source
    # the package directory is mounted as itself: /opt/synth_ai/task_app is where `import calc_env` finds it
    mounts = _MOUNT.findall(source)
    assert (str(ENVS / "calc_env"), "/opt/synth_ai/task_app/calc_env") in mounts
    assert not any(local == str(ENVS) for local, _ in mounts)
    assert "TASK_APP_MODULE = '/opt/synth_ai/task_app/calc_env/__init__.py'" in source
    assert "ENVIRONMENT" not in source  # no env args, nothing to set


def test_plan_copies_an_installed_single_module_alone_and_checks_the_environment(tmp_path: Path) -> None:
    """A module installed in site-packages is copied as that one file, never the whole site-packages."""
    from synth_ai.deploy.modal_script import plan_for_entry, render_modal_script
    from synth_ai.taskapp.config import ModalDeploymentConfig, TaskAppEntry

    site = tmp_path / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "my_env.py").write_text("# an installed environment\n")
    (site / "other_package.py").write_text("# not ours\n")
    entry = TaskAppEntry(app_id="verifiers:my-env", description="d", config_factory=lambda: None,
                         modal=ModalDeploymentConfig(app_name="synth-vf-my_env", environment=(("A_B", "1"),)))
    plan = plan_for_entry(entry, module_path=site / "my_env.py")
    assert all(local != str(site) for local, _ in plan.local_dirs)
    assert plan.local_files == ((str(site / "my_env.py"), "/opt/synth_ai/task_app/site-packages/my_env.py"),)
    source = render_modal_script(plan)
    assert (f".add_local_file({str(site / 'my_env.py')!r}, "
            "remote_path='/opt/synth_ai/task_app/site-packages/my_env.py')") in source
    assert plan.remote_module_path == "/opt/synth_ai/task_app/site-packages/my_env.py"

    for bad, message in (((("1X", "v"),), "not a variable name"), ((("X", 3),), "must be a string")):
        broken = TaskAppEntry(app_id="a", description="d", config_factory=lambda: None,
                              modal=ModalDeploymentConfig(app_name="a", environment=bad))
        with pytest.raises(ValueError, match=message):
            plan_for_entry(broken, module_path=site / "my_env.py")


def test_a_bundled_taskset_copies_nothing_and_loads_by_id(cli, isolated_home: Path, monkeypatch) -> None:
    """A taskset bundled with verifiers has no module of its own: nothing but this package is copied (not the
    working directory), and the container finds the app by its id alone."""
    (isolated_home / "unrelated.txt").write_text("the deploying shell's working directory\n")
    env_file = isolated_home.parent / "deploy.env"
    env_file.write_text(f"ENVIRONMENT_API_KEY={ENV_KEY}\n")
    result = cli("--json", "deploy", "verifiers:textarena", "--dry-run", "--env-file", str(env_file))
    assert result.exit_code == 0, result.stdout + result.stderr
    source = result.json()["source"]
    assert [remote for _, remote in _MOUNT.findall(source)] == ["/opt/synth_ai/synth_ai"]
    assert str(isolated_home) not in source and ".add_local_file(" not in source
    assert "TASK_APP_MODULE = None" in source and "    return task_app_asgi(TASK_APP_ID, None)" in source
    path = isolated_home / "bundled_modal.py"
    path.write_text(source)
    assert load_script(path).app.name == "synth-vf-textarena"  # the source is valid Modal

    from synth_ai.deploy.modal_runtime import task_app_asgi

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    app = task_app_asgi(f"verifiers:{ENVS / 'qa_env.py'}", None)  # by id: discovery resolves it
    assert app.title == "verifiers: qa_env"


@pytest.fixture(scope="module")
def container_root(tmp_path_factory) -> Path:
    """A stand-in for /opt/synth_ai holding this package, as the image does."""
    import synth_ai

    root = tmp_path_factory.mktemp("container") / "opt" / "synth_ai"
    shutil.copytree(Path(synth_ai.__file__).parent, root / "synth_ai", ignore=_IGNORE)
    return root


@pytest.mark.parametrize(("spec", "env_args", "module", "sizes"), [
    ("tests/verifiers_envs/qa_env.py", '{"split":"test"}', "qa_env", {"train": 2, "eval": 2}),
    ("tests/verifiers_envs/calc_env", None, "calc_env", {"train": 3, "eval": 3}),
])
def test_container_loads_the_copied_environment_with_its_env_args(
        cli, isolated_home: Path, monkeypatch, container_root: Path, tmp_path: Path, spec: str,
        env_args: str | None, module: str, sizes: dict[str, int]) -> None:
    if env_args:
        monkeypatch.setenv("SYNTH_VERIFIERS_ENV_ARGS", env_args)
    doc = dry_run(cli, isolated_home, monkeypatch, spec)
    source = doc["source"]
    for local, remote in _MOUNT.findall(source):
        if remote.startswith(f"{REMOTE_ROOT}/task_app/"):
            shutil.copytree(local, container_root / remote[len(REMOTE_ROOT) + 1:], ignore=_IGNORE,
                            dirs_exist_ok=True)
    script = tmp_path / "container_modal.py"
    script.write_text(source.replace(REMOTE_ROOT, str(container_root)))
    probe = generated_app_probe(script) + textwrap.dedent(f'''
        import json, os
        from starlette.testclient import TestClient
        import synth_ai
        with TestClient(app) as client:  # runs the lifespan: verifiers' serving resources start and stop
            info = client.get("/task_info", headers={{"X-API-Key": {ENV_KEY!r}}})
            one = client.get("/task_info", params={{"seed": 1}}, headers={{"X-API-Key": {ENV_KEY!r}}})
        print(json.dumps({{"synth_ai": synth_ai.__file__, "env": sys.modules[{module!r}].__file__,
                          "status": [info.status_code, one.status_code], "taskset": info.json().get("taskset"),
                          "seed": one.json(), "env_args": os.environ.get("SYNTH_VERIFIERS_ENV_ARGS")}}))
    ''')
    run_dir = tmp_path / "elsewhere"  # `spec` is relative to the repository: it names nothing here
    run_dir.mkdir()
    drop = ("PYTHONPATH", "SYNTH_VERIFIERS_ENV_ARGS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["ENVIRONMENT_API_KEY"] = ENV_KEY  # what the app's Modal secret gives the container
    result = subprocess.run([sys.executable, "-c", probe], cwd=run_dir, env=env, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["synth_ai"].startswith(str(container_root / "synth_ai"))
    assert found["env"].startswith(str(container_root / "task_app"))
    assert found["status"] == [200, 200]
    assert found["taskset"]["sizes"] == sizes
    assert found["taskset"]["env_args"] == (json.loads(env_args) if env_args else {})
    assert found["env_args"] == (json.dumps(json.loads(env_args), sort_keys=True) if env_args else None)
    assert found["seed"]["task_metadata"]["seed"] == 1
