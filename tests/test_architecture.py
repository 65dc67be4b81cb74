"""The layer order of src/synth_ai, its size rules, and the checker that enforces them (scripts/import_map.py).

The real tree must have no import circle, no upward import, no module outside a layer, no module over 400 lines and
no function whose own body is over 100 lines, and docs/architecture.md must show the table and diagram the script
generates now. The checker itself is tried on small packages written to tmp_path, so these tests cannot pass
because it finds nothing anywhere.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC = REPO_ROOT / "docs" / "architecture.md"
REWRITE = "python scripts/import_map.py --write-doc docs/architecture.md"


def _load_script():
    spec = importlib.util.spec_from_file_location("import_map", REPO_ROOT / "scripts" / "import_map.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


import_map = _load_script()


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_map.import_graph()


# --- the real tree -----------------------------------------------------------------------------------------------

def test_the_graph_is_the_real_one(graph):
    """A sanity floor under the checks below: the scan sees the package, lazy imports included."""
    assert len(graph) > 200
    assert "synth_ai.cli.main" in graph and "synth_ai.backend.api.app" in graph
    assert "synth_ai.cli.quick_validate" in graph["synth_ai.cli.main"]  # imported inside main()


def test_the_backend_top_level_holds_few_modules():
    """The backend's own work sits in rooms (api/, jobs/, store/, ...); its top level keeps at most six modules."""
    top = sorted(p.name for p in (REPO_ROOT / "src" / "synth_ai" / "backend").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 6, top


def test_key_functions_still_import_from_the_path_the_docs_named():
    """`synth_ai.backend.auth` was where the docs sent users for the backend's keys; it re-exports the same objects."""
    from synth_ai.backend import auth
    from synth_ai.env import backend_keys

    for name in ("create_key", "default_key", "known_environment_keys", "environment_keys"):
        assert getattr(auth, name) is getattr(backend_keys, name)


def test_no_import_circles(graph):
    found = import_map.circles(graph)
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_upward_imports(graph):
    found = import_map.upward_imports(graph)
    assert not found, "imports that go up the layer order (docs/architecture.md):\n" + "\n".join(
        f"{a} -> {b}" for a, b in found)


def test_every_module_belongs_to_a_layer(graph):
    found = import_map.uncovered(graph)
    assert not found, "modules no layer covers (add them to LAYERS in scripts/import_map.py):\n" + "\n".join(found)


def test_architecture_doc_shows_the_current_layers_and_diagram(graph):
    shown = import_map.doc_block_in(DOC)
    assert shown is not None, f"docs/architecture.md lost its markers {import_map.DOC_BEGIN} / {import_map.DOC_END}"
    assert shown == import_map.doc_block(graph), f"docs/architecture.md is stale: run `{REWRITE}`"


def test_no_module_over_400_lines():
    found = import_map.long_modules()
    assert not found, "modules over the limit:\n" + "\n".join(found)


def test_no_function_body_over_100_lines():
    found = import_map.long_functions()
    assert not found, "functions over the limit (nested definitions not counted):\n" + "\n".join(found)


# --- the checker on small packages ------------------------------------------------------------------------------

def _package(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (paths relative to src/) and return the src folder."""
    src = root / "src"
    for name, text in files.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return src


TOY_LAYERS = (
    import_map.Layer("top", "Top", "uses the rest", ("toy.top",)),
    import_map.Layer("low", "Low", "used by the rest", ("toy.low",), ("toy",)),
)


def test_a_circle_through_a_lazy_relative_import_is_found(tmp_path):
    src = _package(tmp_path, {
        "toy/__init__.py": "",
        "toy/low/__init__.py": "",
        "toy/low/a.py": "from toy.low import b\n",
        "toy/low/b.py": "def later():\n    from . import a\n",
        "toy/low/c.py": "import toy.low.a\n",  # into the circle, not part of it
    })
    graph = import_map.import_graph(src, "toy")
    assert import_map.circles(graph) == [["toy.low.a", "toy.low.b"]]
    assert any(line.startswith("circle: toy.low.a <-> toy.low.b") for line in import_map.problems(graph, TOY_LAYERS))


def test_an_upward_import_and_an_uncovered_module_are_found(tmp_path):
    src = _package(tmp_path, {
        "toy/__init__.py": "",
        "toy/top.py": "from toy.low.util import helper\n",
        "toy/low/__init__.py": "",
        "toy/low/util.py": "def helper():\n    from toy.top import main\n",
        "toy/stray.py": "",
    })
    graph = import_map.import_graph(src, "toy")
    assert import_map.upward_imports(graph, TOY_LAYERS) == [("toy.low.util", "toy.top")]
    assert import_map.uncovered(graph, TOY_LAYERS) == ["toy.stray"]
    assert import_map.circles(graph) == [["toy.low.util", "toy.top"]]


def test_a_clean_package_passes_and_imports_resolve_to_the_most_specific_module(tmp_path):
    src = _package(tmp_path, {
        "toy/__init__.py": "from toy.low import util\n",
        "toy/top.py": "import toy.low.util.missing\nfrom toy.low import util, NAME\nfrom ..outside import x\n",
        "toy/low/__init__.py": "NAME = 1\n",
        "toy/low/util.py": "import os\nfrom . import NAME\n",
    })
    graph = import_map.import_graph(src, "toy")
    assert graph["toy.top"] == {"toy.low.util", "toy.low"}  # a name in a package counts as the package
    assert graph["toy.low.util"] == {"toy.low"}
    assert import_map.problems(graph, TOY_LAYERS) == []
    diagram = import_map.mermaid(graph, TOY_LAYERS)
    assert diagram.startswith("flowchart TD\n") and "    top --> low\n" in diagram and "-.->" not in diagram


def test_the_diagram_marks_an_upward_edge(tmp_path):
    src = _package(tmp_path, {"toy/__init__.py": "", "toy/top.py": "", "toy/low/__init__.py": "import toy.top\n"})
    diagram = import_map.mermaid(import_map.import_graph(src, "toy"), TOY_LAYERS)
    assert "    low -.-> top\n" in diagram


def test_write_doc_replaces_only_what_is_between_the_markers(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{import_map.DOC_BEGIN}\nold\n{import_map.DOC_END}\noutro\n", encoding="utf-8")
    assert import_map.write_doc(doc, "new\n") is True
    assert doc.read_text(encoding="utf-8") == f"intro\n{import_map.DOC_BEGIN}\nnew\n{import_map.DOC_END}\noutro\n"
    assert import_map.doc_block_in(doc) == "new\n"
    assert import_map.write_doc(doc, "new\n") is False


def test_size_rules_count_a_functions_own_body(tmp_path):
    body = "    x = 0\n" * 100
    nested = "    def inner():\n" + "        y = 1\n" * 50
    src = _package(tmp_path, {
        "toy/__init__.py": "",
        "toy/ok.py": f"def at_the_limit():\n{body}",
        "toy/long.py": f"def over():\n{body}    return x\n",
        "toy/nested.py": f"def outer():\n{nested}{body}",  # 150 lines in all, 100 of its own
        "toy/big.py": "x = 1\n" * 401,
    })
    assert import_map.long_functions(src, "toy") == ["src/toy/long.py:1 over(): body of 101 lines (limit 100)"]
    assert import_map.long_modules(src, "toy") == ["src/toy/big.py: 401 lines (limit 400)"]


# --- the design's rules beyond the order: FORBIDDEN imports, no branch on a job kind's name ----------------------
# (one block; a rule is a row of `FORBIDDEN` in scripts/import_map.py plus a planted violation here)

def test_no_forbidden_import(graph):
    assert [f"{a} -> {b}" for a, b, _ in import_map.forbidden_imports(graph)] == []


def test_the_forbidden_arrows_include_trainers_from_executors_and_api():
    rules = {(rule.importer, rule.imported) for rule in import_map.FORBIDDEN}
    assert ("synth_ai.backend.executors", "synth_ai.backend.trainers") in rules
    assert ("synth_ai.backend.api", "synth_ai.backend.trainers") in rules


def test_no_branch_on_a_job_kinds_name_outside_its_registry():
    assert {"sft", "rl"} <= import_map.kind_names()  # the scan knows the registered names
    assert import_map.kind_branches() == []


def _backend_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    return _package(tmp_path, {"synth_ai/__init__.py": "", "synth_ai/backend/__init__.py": "",
                               "synth_ai/backend/trainers/__init__.py": "", "synth_ai/backend/trainers/rl.py": "",
                               **files})


@pytest.mark.parametrize("room", ["executors", "api"])
def test_a_trainer_imported_from_the_executors_or_the_api_is_found(tmp_path, room):
    src = _backend_tree(tmp_path, {
        f"synth_ai/backend/{room}/__init__.py": "",
        f"synth_ai/backend/{room}/launch.py": "def later():\n    from synth_ai.backend.trainers.rl import run_rl\n",
        "synth_ai/backend/jobs.py": "import synth_ai.backend.trainers.rl\n",  # allowed: the worker runs trainers
    })
    graph = import_map.import_graph(src, "synth_ai")
    found = import_map.forbidden_imports(graph)
    assert [(a, b) for a, b, _ in found] == [(f"synth_ai.backend.{room}.launch", "synth_ai.backend.trainers.rl")]
    assert any(line.startswith(f"forbidden import: synth_ai.backend.{room}.launch -> ")
               for line in import_map.problems(graph, import_map.LAYERS, src))


def test_a_branch_on_a_registered_kinds_name_is_found(tmp_path):
    src = _backend_tree(tmp_path, {
        "synth_ai/backend/jobs/__init__.py": "",
        "synth_ai/backend/jobs/kinds.py": 'TOY = "toy"\nKINDS = [JobKind(name=TOY), JobKind(name="rl")]\n'
                                          'same = kind == "rl"  # the registry itself may\n',
        "synth_ai/backend/executors/__init__.py": "",
        "synth_ai/backend/executors/launch.py": 'def f(row, kind, mode):\n    if row["kind"] == "toy":\n'
                                                '        pass\n    if "rl" != kind:\n        pass\n'
                                                '    if mode == "rl":  # not a kind\n        pass\n',
    })
    assert import_map.kind_names(src) == {"toy", "rl"}
    found = import_map.kind_branches(src)
    assert [line.split(": ")[0].rsplit("/", 1)[-1] for line in found] == ["launch.py:2", "launch.py:4"]
    graph = import_map.import_graph(src, "synth_ai")
    assert sum(line.startswith("branch on a job kind's name: ")
               for line in import_map.problems(graph, import_map.LAYERS, src)) == 2


# --- the SDK below the server (issue 36): the client imports no backend, a task app no client -----------------------

def test_the_client_imports_no_backend_and_task_apps_import_no_client(graph):
    rules = {(rule.importer, rule.imported) for rule in import_map.FORBIDDEN}
    assert {("synth_ai.client", "synth_ai.backend"), ("synth_ai.taskapp", "synth_ai.client")} <= rules
    found = [f"{a} -> {b}" for a, b, rule in import_map.forbidden_imports(graph) if rule.importer in
             ("synth_ai.client", "synth_ai.taskapp")]
    assert not found, "imports FORBIDDEN rules out (scripts/import_map.py):\n" + "\n".join(found)


PLANTED = {
    "client -> backend, lazily": ({
        "synth_ai/client/connect.py": "def later():\n    from synth_ai.backend.daemon import start\n",
        "synth_ai/client/fine.py": "from synth_ai.models import job_ids\n",
        "synth_ai/backend/__init__.py": "",
        "synth_ai/backend/daemon.py": "",
        "synth_ai/models/__init__.py": "",
        "synth_ai/models/job_ids.py": "",
    }, "synth_ai.client.connect -> synth_ai.backend.daemon"),
    "taskapp -> client": ({
        "synth_ai/taskapp/serving.py": "import synth_ai.client.env_keys\n",
        "synth_ai/taskapp/auth.py": "from synth_ai.env import secrets\n",
        "synth_ai/client/__init__.py": "",
        "synth_ai/client/env_keys.py": "",
        "synth_ai/env/__init__.py": "",
        "synth_ai/env/secrets.py": "",
    }, "synth_ai.taskapp.serving -> synth_ai.client.env_keys"),
}


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_forbidden_import_is_found_and_only_it(tmp_path, case):
    files, arrow = PLANTED[case]
    packages = {f"{'/'.join(name.split('/')[:2])}/__init__.py": "" for name in files}
    src = _package(tmp_path, {"synth_ai/__init__.py": "", **packages, **files})
    graph = import_map.import_graph(src, "synth_ai")
    found = import_map.forbidden_imports(graph)
    assert [f"{a} -> {b}" for a, b, _ in found] == [arrow]
    assert any(line.startswith(f"forbidden import: {arrow} (") for line in import_map.problems(graph, TOY_LAYERS))
