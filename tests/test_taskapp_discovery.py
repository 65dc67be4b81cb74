"""Finding task apps: bundled apps, search paths, aliases, the AST scan (no import), unknown ids, `task-app list`."""

from __future__ import annotations

import textwrap

import pytest

from synth_ai.taskapp.discovery import discover_task_apps, find_task_app, load_task_app, scan_file
from synth_ai.taskapp.errors import TaskAppNotFoundError

CUSTOM_APP = textwrap.dedent('''
    from synth_ai.taskapp import TaskAppConfig, TaskAppEntry, TaskInfo, register_task_app

    APP_ID = "custom-echo"

    def build():
        return TaskAppConfig(app_id=APP_ID, name="Echo", description="echo",
                             base_task_info=TaskInfo(task={"id": "echo", "name": "Echo"}, environment="echo"),
                             describe_taskset=lambda: {"id": "echo"}, provide_task_instances=lambda s: [],
                             rollout=lambda r, q: None)

    register_task_app(entry=TaskAppEntry(app_id=APP_ID, description="An echo app", config_factory=build,
                                         aliases=("echo", "parrot")))
''')

CONFIG_ONLY_APP = textwrap.dedent('''
    from synth_ai.taskapp import TaskAppConfig, TaskInfo

    def build_config():
        return TaskAppConfig(app_id="config-only", name="C", description="c",
                             base_task_info=TaskInfo(task={"id": "c", "name": "C"}, environment="c"),
                             describe_taskset=lambda: {}, provide_task_instances=lambda s: [],
                             rollout=lambda r, q: None)
''')

EXPLODING = textwrap.dedent('''
    raise RuntimeError("discovery must not import this file")
    TaskAppEntry(app_id="exploding")
''')


def test_bundled_math_app_is_found_by_id_and_alias():
    ids = {c.app_id for c in discover_task_apps()}
    assert "math-single-step" in ids
    for name in ("math-single-step", "math"):
        choice = find_task_app(name)
        assert choice.app_id == "math-single-step"
        assert choice.path.name == "task_app.py" and choice.path.parent.name == "math"
    entry = load_task_app("math")
    assert entry.app_id == "math-single-step" and "math" in entry.aliases
    assert entry.modal is not None and entry.modal.app_name


def test_search_path_app_with_aliases_and_no_import_during_scan(tmp_path, monkeypatch):
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "echo_task_app.py").write_text(CUSTOM_APP)
    (apps / "config_app.py").write_text(CONFIG_ONLY_APP)
    (apps / "boom.py").write_text(EXPLODING)
    (apps / "__pycache__").mkdir()
    (apps / "__pycache__" / "hidden.py").write_text(CUSTOM_APP.replace("custom-echo", "hidden-app"))
    monkeypatch.setenv("SYNTH_TASK_APP_SEARCH_PATH", str(apps))
    found = {c.app_id: c for c in discover_task_apps()}
    assert {"custom-echo", "config-only", "exploding"} <= set(found)  # boom.py was parsed, never run
    assert "hidden-app" not in found
    assert found["custom-echo"].aliases == ("echo", "parrot")
    assert found["custom-echo"].description == "An echo app"
    assert find_task_app("parrot").app_id == "custom-echo"
    entry = load_task_app("echo")
    assert entry.app_id == "custom-echo" and entry.config_factory().name == "Echo"
    built = load_task_app("config-only")
    assert built.config_factory().app_id == "config-only"


def test_unknown_id_lists_available_ids():
    with pytest.raises(TaskAppNotFoundError) as info:
        find_task_app("no-such-app")
    message = info.value.message
    assert message.startswith("Task app 'no-such-app' not found. Available: ")
    assert "math-single-step" in message
    assert "task-app list" in info.value.hint


def test_bundled_dir_can_be_overridden(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNTH_BUNDLED_TASK_APPS_DIR", str(tmp_path))
    assert not any(c.app_id == "math-single-step" for c in discover_task_apps())
    (tmp_path / "echo_task_app.py").write_text(CUSTOM_APP)
    assert find_task_app("echo").app_id == "custom-echo"


def test_modal_scripts_are_listed_only_when_asked(tmp_path):
    (tmp_path / "modal_app.py").write_text('import modal\napp = modal.App("my-modal-app")\n')
    assert scan_file(tmp_path / "modal_app.py")[0].kind == "modal"
    assert not discover_task_apps(roots=[tmp_path])
    assert discover_task_apps(roots=[tmp_path], include_modal=True)[0].app_id == "my-modal-app"


def test_task_app_list_command(cli):
    human = cli("task-app", "list")
    assert human.exit_code == 0
    assert "- math-single-step (aliases: math, math-single):" in human.stdout
    doc = cli("task-app", "list", "--json").json()
    math = next(a for a in doc["task_apps"] if a["id"] == "math-single-step")
    assert math["aliases"] == ["math", "math-single"] and math["description"]


def test_serve_unknown_app_is_not_found(cli, monkeypatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "sk_env_test_0123456789abcdef")
    result = cli("serve", "nope-app", "--port", "8001")
    assert result.exit_code == 8
    assert "Task app 'nope-app' not found. Available:" in result.stderr


BUNDLED_IDS = {"math-single-step", "color-quiz", "grpo-crafter-task-app"}


def _app_source(app_id: str) -> str:
    return CUSTOM_APP.replace("custom-echo", app_id)


def _checkout_shaped_tree(root):
    """A project laid out like this checkout: a real app of its own beside tests, benches, a venv and fixtures that
    declare apps (as tests/ and bench/ here do)."""
    files = {
        "examples/task_apps/mine/task_app.py": _app_source("my-real-app"),
        "apps/other_app.py": _app_source("other-real-app"),
        "tests/test_fixtures.py": _app_source("toy-app"),
        "tests/support/fixture_app.py": _app_source("fixture-app"),
        "test/helpers.py": _app_source("helper-app"),
        "bench/prose_task_app.py": _app_source("bench-prose"),
        "benchmarks/gpu/gpu_task_app.py": _app_source("gpu-kit-bench"),
        "conftest.py": _app_source("conftest-app"),
        "apps/checks_test.py": _app_source("checks-test-app"),
        "pyenv/lib/python3.11/site-packages/pkg/app.py": _app_source("installed-app"),
        ".hidden/app.py": _app_source("hidden-app"),
    }
    for name, source in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(source)
    (root / "pyenv" / "pyvenv.cfg").write_text("home = /usr/bin\n")  # a venv whatever its name
    return root


def test_a_checkout_shaped_tree_lists_only_its_real_apps(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(_checkout_shaped_tree(tmp_path / "project"))
    listed = cli("--json", "task-app", "list")
    assert listed.exit_code == 0, listed.stderr
    assert {app["id"] for app in listed.json()["task_apps"]} == {"my-real-app", "other-real-app"} | BUNDLED_IDS
    unknown = cli("serve", "nope-app", "--port", "8001")
    assert unknown.exit_code == 8
    available = unknown.stderr.split("Available:", 1)[1].split("\n", 1)[0]
    assert "toy-app" not in available and "bench-prose" not in available and "my-real-app" in available


def test_an_app_in_a_test_tree_is_found_when_its_folder_is_on_the_search_path(tmp_path, monkeypatch):
    tree = _checkout_shaped_tree(tmp_path / "project")
    monkeypatch.chdir(tree)
    monkeypatch.setenv("SYNTH_TASK_APP_SEARCH_PATH", str(tree / "tests" / "support"))
    found = {c.app_id for c in discover_task_apps()}
    assert "fixture-app" in found and "toy-app" not in found


def test_this_checkout_lists_the_bundled_apps_and_none_of_its_test_or_bench_fixtures(cli, monkeypatch):
    from conftest import REPO_ROOT

    monkeypatch.chdir(REPO_ROOT)
    listed = cli("--json", "task-app", "list")
    assert listed.exit_code == 0, listed.stderr
    assert {app["id"] for app in listed.json()["task_apps"]} == BUNDLED_IDS
