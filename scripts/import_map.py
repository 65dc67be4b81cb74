#!/usr/bin/env python3
"""The import map of src/synth_ai: who imports whom, the layer order they must keep, and the size rules.

Stdlib only (`ast`), so it runs before anything is installed. Every `import` and `from ... import` statement counts,
relative ones and those inside functions included: a lazy import still ties two modules together. An import of
`a.b.c` (or `from a.b import c`) is an edge to the most specific module that exists.

    python scripts/import_map.py --check       circles, upward imports, modules no layer covers, FORBIDDEN imports,
                                               branches on a job kind's name outside its registry (exit 1 if any)
    python scripts/import_map.py --sizes       modules over 400 lines, functions whose own body is over 100 (exit 1)
    python scripts/import_map.py --mermaid     the layer diagram (Mermaid flowchart)
    python scripts/import_map.py --write-doc docs/architecture.md    rewrite its layer table and diagram

LAYERS below is the one written-down source of the order (docs/architecture.md shows it); FORBIDDEN lists the
arrows the order allows but the design does not.
"""
from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = "synth_ai"
SRC = Path(__file__).resolve().parent.parent / "src"
DOC_BEGIN = "<!-- import-map:begin -->"
DOC_END = "<!-- import-map:end -->"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 100


@dataclass(frozen=True)
class Layer:
    """One rung of the order. `trees`: these modules and everything under them; `exact`: only these modules."""

    key: str  # node id in the diagram
    title: str
    description: str
    trees: tuple[str, ...] = ()
    exact: tuple[str, ...] = ()


# Top to bottom: a module may import from its own layer or any layer below it, never above.
LAYERS: tuple[Layer, ...] = (
    Layer("cli", "CLI", "the `synth-ai` command: arguments, terminal and JSON output, the error boundary",
          ("synth_ai.__main__", "synth_ai.cli")),
    Layer("flows", "Flows", "what a command does, step by step (demo, setup, train, eval, filter, deploy, reaching "
          "a backend, and serving a task app, whose module keeps its documented path in the task-app SDK)",
          ("synth_ai.demo", "synth_ai.setup", "synth_ai.train", "synth_ai.eval", "synth_ai.filter",
           "synth_ai.deploy", "synth_ai.connect", "synth_ai.taskapp.serving")),
    Layer("client", "Client", "the SDK: talk to a backend over HTTP, follow jobs, upload files",
          ("synth_ai.client",)),
    Layer("daemon", "backend.daemon", "start, stop and find the backend process", ("synth_ai.backend.daemon",)),
    Layer("api", "backend.api", "the FastAPI app: routes, auth, checks of request bodies", ("synth_ai.backend.api",)),
    Layer("executors", "backend.executors", "where a job runs: local process, torchrun, Modal",
          ("synth_ai.backend.executors",)),
    Layer("jobs", "backend.jobs", "the scheduler and the job process", ("synth_ai.backend.jobs",)),
    Layer("trainers", "backend.trainers", "SFT and RL (GSPO) training loops, checkpoints",
          ("synth_ai.backend.trainers",)),
    Layer("inference", "backend.inference", "generation engines and the policy server",
          ("synth_ai.backend.inference",)),
    Layer("store", "backend.store", "SQLite records, files, blobs, models, sealed keys", ("synth_ai.backend.store",)),
    Layer("ml", "backend.ml", "model loading, chat templates, tiny models", ("synth_ai.backend.ml",)),
    Layer("backend_base", "backend base", "server settings, the JSON error shape, the backend package, the key "
          "functions' old path",
          ("synth_ai.backend.server_settings", "synth_ai.backend.http_errors", "synth_ai.backend.auth"),
          ("synth_ai.backend",)),
    Layer("taskapp", "Task apps and tracing", "the task-app SDK and server, the task apps bundled with the package, "
          "trace recording",
          ("synth_ai.taskapp", "synth_ai.bundled_apps", "synth_ai.tracing", "synth_ai.verifiers_app")),
    Layer("shared", "Shared definitions", "what client and backend agree on: config files, dataset rules, the model "
          "registry, env and key files, experiment trackers",
          ("synth_ai.config", "synth_ai.datasets", "synth_ai.models", "synth_ai.env", "synth_ai.tracking")),
    Layer("foundation", "Foundation", "small helpers any layer may use: errors and exit codes, files, JSON, "
          "loopback HTTP, URLs, ports, processes, charts, time",
          ("synth_ai.errors", "synth_ai.fsutil", "synth_ai.lean_json", "synth_ai.loopback_http", "synth_ai.charts",
           "synth_ai.apidocs", "synth_ai.timestamps", "synth_ai.ports", "synth_ai.processes", "synth_ai.urls",
           "synth_ai.chat_sse"),
          ("synth_ai",)),
)


@dataclass(frozen=True)
class Forbidden:
    """A rule the layer order alone does not state: no module under `importer` imports one under `imported`."""

    importer: str
    imported: str
    why: str


# Arrows the order allows but the design does not (docs/architecture.md). One row per rule; add rows here.
FORBIDDEN: tuple[Forbidden, ...] = (
    Forbidden("synth_ai.backend.executors", "synth_ai.backend.trainers",
              "an executor runs any kind's worker; what differs by kind is a hook of its JobKind"),
    Forbidden("synth_ai.backend.api", "synth_ai.backend.trainers",
              "the API process never imports a trainer; it calls its kind's hooks, loaded by name"),
    # The SDK below the server: the client talks HTTP to a backend it is handed (starting or finding the embedded
    # backend is a flow, synth_ai.connect), and a task app never drives the learning API (`synth_ai.taskapp.serving`
    # sits in the flows layer but lives in the task-app SDK, so it is held to this rule: the CLI hands it the
    # key-sharing step).
    Forbidden("synth_ai.client", "synth_ai.backend",
              "the client must not import the backend: starting or finding the embedded backend is a flow"),
    Forbidden("synth_ai.taskapp", "synth_ai.client",
              "a task app must not import the client: the caller hands it any step that reaches a backend"),
)
# Where the job kinds are registered, and the package in which no other module may branch on a kind's name.
KIND_REGISTRY = "synth_ai.backend.jobs.kinds"
KIND_SCOPE = "synth_ai.backend"


def layer_of(module: str, layers: tuple[Layer, ...] = LAYERS) -> int | None:
    """Index into `layers` of the most specific entry covering `module`; None when none does."""
    best: tuple[int, int] | None = None  # (length of the matching name, layer index)
    for index, layer in enumerate(layers):
        names = [n for n in layer.trees if module == n or module.startswith(n + ".")]
        names += [n for n in layer.exact if module == n]
        for name in names:
            if best is None or len(name) > best[0]:
                best = (len(name), index)
    return None if best is None else best[1]


# --- the graph -------------------------------------------------------------------------------------------------

def find_modules(src: Path, root: str = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under src/<root> (a package is its __init__.py)."""
    modules = {}
    for path in sorted((src / root).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _most_specific(name: str, modules: dict[str, Path]) -> str | None:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names one statement imports: `a.b` for `import a.b`, `a.b.c` for `from a.b import c`."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: climb from the importing module's package
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: max(0, len(package) - (node.level - 1))]
        base = ".".join(package + ([base] if base else []))
    # `from a.b import c` names either a submodule a.b.c or an attribute of a.b; the resolver picks whichever exists.
    return [f"{base}.{alias.name}" if alias.name != "*" else base for alias in node.names]


def import_graph(src: Path = SRC, root: str = ROOT) -> dict[str, set[str]]:
    """Module -> the set of modules of the same tree it imports (self-imports dropped)."""
    modules = find_modules(src, root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for imported in _imported_names(node, name, path.name == "__init__.py"):
                target = _most_specific(imported, modules)
                if target is not None and target != name:
                    graph[name].add(target)
    return graph


# --- the checks ------------------------------------------------------------------------------------------------

def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def upward_imports(graph: dict[str, set[str]], layers: tuple[Layer, ...] = LAYERS) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the imported module sits in a higher layer than its importer."""
    found = []
    for module in sorted(graph):
        mine = layer_of(module, layers)
        for target in sorted(graph[module]):
            theirs = layer_of(target, layers)
            if mine is not None and theirs is not None and theirs < mine:
                found.append((module, target))
    return found


def _under(module: str, tree: str) -> bool:
    return module == tree or module.startswith(tree + ".")


def forbidden_imports(graph: dict[str, set[str]],
                      rules: tuple[Forbidden, ...] = FORBIDDEN) -> list[tuple[str, str, Forbidden]]:
    """(importer, imported, rule) for every import a rule forbids."""
    return [(module, target, rule) for rule in rules for module in sorted(graph) if _under(module, rule.importer)
            for target in sorted(graph[module]) if _under(target, rule.imported)]


def kind_names(src: Path = SRC, registry: str = KIND_REGISTRY) -> set[str]:
    """The names of the registered job kinds: `JobKind(name=...)` in the registry, a string or a module constant."""
    path = find_modules(src, registry.split(".")[0]).get(registry)
    if path is None:
        return set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                 for t in n.targets if isinstance(t, ast.Name)}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "JobKind":
            for keyword in node.keywords:
                if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                    names.add(keyword.value.value)
                elif keyword.arg == "name" and isinstance(keyword.value, ast.Name):
                    names.add(constants.get(keyword.value.id))
    return names - {None}


def kind_branches(src: Path = SRC, registry: str = KIND_REGISTRY, scope: str = KIND_SCOPE) -> list[str]:
    """`kind == "<a registered name>"` (or `!=`, either side) outside the registry: what differs by kind belongs
    to a hook of its JobKind. "path:line: the comparison", one per branch."""
    names = kind_names(src, registry)
    found = []
    for module, path in find_modules(src, scope.split(".")[0]).items():
        if not _under(module, scope) or module == registry:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare) or len(node.ops) != 1 or \
                    not isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
                continue
            sides = (node.left, node.comparators[0])
            named = [x for x in sides if isinstance(x, ast.Constant) and x.value in names]
            other = [ast.unparse(x) for x in sides if not isinstance(x, ast.Constant)]
            if named and other and ("kind" in other[0].lower() or "job_type" in other[0]):
                found.append(f"{_shown(path, src)}:{node.lineno}: {ast.unparse(node)}")
    return found


def uncovered(graph: dict[str, set[str]], layers: tuple[Layer, ...] = LAYERS) -> list[str]:
    """Modules no layer covers."""
    return [module for module in sorted(graph) if layer_of(module, layers) is None]


def _own_body_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function's body, less the lines of functions and classes defined inside it."""
    body = function.body
    total = body[-1].end_lineno - body[0].lineno + 1
    nested_spans: list[tuple[int, int]] = []
    for node in ast.walk(function):
        if node is not function and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            nested_spans.append((first, node.end_lineno))
    covered: set[int] = set()  # nested defs inside nested defs overlap; count each line once
    for first, last in nested_spans:
        covered.update(range(first, last + 1))
    return total - len(covered)


def _shown(path: Path, src: Path) -> Path:
    return path.relative_to(src.parent) if src.parent in path.parents else path


def long_modules(src: Path = SRC, root: str = ROOT) -> list[str]:
    """One line per module longer than MAX_MODULE_LINES lines."""
    found = []
    for path in find_modules(src, root).values():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{_shown(path, src)}: {lines} lines (limit {MAX_MODULE_LINES})")
    return found


def long_functions(src: Path = SRC, root: str = ROOT) -> list[str]:
    """One line per function whose own body (nested definitions not counted) exceeds MAX_FUNCTION_LINES lines."""
    found = []
    for path in find_modules(src, root).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                own = _own_body_lines(node)
                if own > MAX_FUNCTION_LINES:
                    found.append(f"{_shown(path, src)}:{node.lineno} {node.name}(): body of {own} lines "
                                 f"(limit {MAX_FUNCTION_LINES})")
    return found


def oversized(src: Path = SRC, root: str = ROOT) -> list[str]:
    """Everything that breaks the size rules: long modules, then long functions."""
    return long_modules(src, root) + long_functions(src, root)


# --- the diagram -----------------------------------------------------------------------------------------------

def layer_edges(graph: dict[str, set[str]], layers: tuple[Layer, ...] = LAYERS) -> list[tuple[int, int]]:
    """(importer layer, imported layer) pairs that the real graph has, in layer order."""
    edges = set()
    for module, targets in graph.items():
        mine = layer_of(module, layers)
        for target in targets:
            theirs = layer_of(target, layers)
            if mine is not None and theirs is not None and mine != theirs:
                edges.add((mine, theirs))
    return sorted(edges)


def mermaid(graph: dict[str, set[str]], layers: tuple[Layer, ...] = LAYERS) -> str:
    """A `flowchart TD` of the layers (the backend's rooms grouped), one edge per pair of layers with imports."""
    def node(index: int, indent: str = "    ") -> str:
        return f'{indent}{layers[index].key}["{index + 1}. {layers[index].title}"]'

    backend = [i for i, layer in enumerate(layers) if any(n.startswith(f"{ROOT}.backend")
                                                           for n in layer.trees + layer.exact)]
    lines = ["flowchart TD"]
    for index in range(len(layers)):
        if index in backend:
            if index == backend[0]:
                lines.append("    subgraph backend")
            lines.append(node(index, " " * 8))
            if index == backend[-1]:
                lines.append("    end")
        else:
            lines.append(node(index))
    for mine, theirs in layer_edges(graph, layers):
        arrow = "-.->" if theirs < mine else "-->"  # dotted: an upward import, which --check rejects
        lines.append(f"    {layers[mine].key} {arrow} {layers[theirs].key}")
    return "\n".join(lines) + "\n"


def layer_table(layers: tuple[Layer, ...] = LAYERS) -> str:
    """The layers as a Markdown table, top first: what each holds and which modules it covers."""
    rows = ["| # | layer | modules | what it holds |", "|---|---|---|---|"]
    for number, layer in enumerate(layers, 1):
        names = [f"`{n}`" for n in layer.trees] + [f"`{n}` (package `__init__`)" for n in layer.exact]
        rows.append(f"| {number} | {layer.title} | {', '.join(names)} | {layer.description} |")
    return "\n".join(rows) + "\n"


def doc_block(graph: dict[str, set[str]], layers: tuple[Layer, ...] = LAYERS) -> str:
    """What goes between the doc's markers: the layer table and the diagram, both generated."""
    return f"{layer_table(layers)}\n```mermaid\n{mermaid(graph, layers)}```\n"


def _split_doc(text: str) -> tuple[str, str, str] | None:
    if DOC_BEGIN not in text or DOC_END not in text:
        return None
    head, rest = text.split(DOC_BEGIN, 1)
    inner, tail = rest.split(DOC_END, 1)
    return head, inner, tail


def doc_block_in(doc: Path) -> str | None:
    """The block now between the markers of `doc` (None when the markers are missing)."""
    parts = _split_doc(doc.read_text(encoding="utf-8"))
    return None if parts is None else parts[1].strip("\n") + "\n"


def write_doc(doc: Path, block: str) -> bool:
    """Put `block` between the markers in `doc`; True when the file changed."""
    text = doc.read_text(encoding="utf-8")
    parts = _split_doc(text)
    if parts is None:
        raise SystemExit(f"{doc}: needs the markers {DOC_BEGIN} and {DOC_END}")
    head, _, tail = parts
    new = f"{head}{DOC_BEGIN}\n{block}{DOC_END}{tail}"
    if new != text:
        doc.write_text(new, encoding="utf-8")
    return new != text


# --- the command -----------------------------------------------------------------------------------------------

def problems(graph: dict[str, set[str]], layers: tuple[Layer, ...] = LAYERS, src: Path = SRC) -> list[str]:
    """Every circle, upward import, uncovered module, forbidden import and kind-name branch, one line each."""
    found = [f"circle: {' <-> '.join(c)}" for c in circles(graph)]
    found += [f"upward import: {a} -> {b} (layer {layer_of(a, layers) + 1} imports layer {layer_of(b, layers) + 1})"
              for a, b in upward_imports(graph, layers)]
    found += [f"no layer covers: {m}" for m in uncovered(graph, layers)]
    found += [f"forbidden import: {a} -> {b} ({rule.why})" for a, b, rule in forbidden_imports(graph)]
    found += [f"branch on a job kind's name: {line} (make it a hook of its JobKind)" for line in kind_branches(src)]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="print circles, upward imports, uncovered modules")
    parser.add_argument("--sizes", action="store_true", help="print modules and functions over the size limits")
    parser.add_argument("--mermaid", action="store_true", help="print the layer diagram")
    parser.add_argument("--write-doc", metavar="DOC", type=Path,
                        help="rewrite the layer table and the diagram between the markers of DOC")
    args = parser.parse_args(argv)
    graph = import_graph()
    status = 0
    if args.mermaid:
        print(mermaid(graph), end="")
    if args.write_doc:
        changed = write_doc(args.write_doc, doc_block(graph))
        print(f"{args.write_doc}: {'layer table and diagram rewritten' if changed else 'already current'}")
    if args.check:
        found = problems(graph)
        print("\n".join(found) if found else "import map: no circles, no upward imports, every module in a layer, no "
                                      "forbidden import, no branch on a job kind's name")
        status |= bool(found)
    if args.sizes:
        found = oversized()
        print("\n".join(found) if found else "sizes: every module and function within the limits")
        status |= bool(found)
    if not (args.mermaid or args.write_doc or args.check or args.sizes):
        parser.print_help()
    return status


if __name__ == "__main__":
    sys.exit(main())
