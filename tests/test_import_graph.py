"""The project's import graph, read with `ast` (nothing is imported): no cycles, and the layering
of ARCHITECTURE.md, counting every import that can run: at module level, in a class body, and
inside functions too. An import inside a function is no way around a circle (a task's module
imports the services it calls; the services never import the task's module back). Only an `if
TYPE_CHECKING:` block never runs, so its imports don't count.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "ethan_site",
    "ethan_shared",
    "ethan_llm",
    "embedder",
    "sessions_app",
    "memory_app",
    "profile_app",
    "episodes_app",
    "agent_app",
    "channels_app",
    "oauth_app",
    # The benchmarks: above everything (nothing imports them), and without circles either.
    "bench",
)

# ethan_site is the wiring (settings, urls, asgi, celery, wsgi, which import the apps): nothing
# in a layer imports it. ethan_shared is the floor below every app: queue, limits, threads,
# pooled connections, the ~/.ethan layout's helpers, config.yaml, the API's authentication and
# throttles (ethan_shared.layout: every layer app reads and writes its own part of the file
# layout, <app>/files.py, and they share its error and its few value helpers).
# Which top-level package may import which at module level ("Imports point one way: channels →
# agent_app → the four layer apps → ethan_llm; memory_app may use sessions_app and profile_app;
# episodes_app may use sessions_app; sessions_app and profile_app use neither of the others").
# "shared" is ethan_shared; every package may also import itself.
ALLOWED = {
    "ethan_llm": set(),
    # The embedder layer, the model layer's neighbour: plain Python on ethan_llm's settings, errors
    # and retry policy; every app may use it, it uses none of them.
    "embedder": {"ethan_llm"},
    "ethan_shared": {"ethan_llm", "embedder"},
    "sessions_app": {"ethan_llm", "embedder", "ethan_shared"},
    "profile_app": {"ethan_llm", "embedder", "ethan_shared"},
    "memory_app": {"sessions_app", "profile_app", "ethan_llm", "embedder", "ethan_shared"},
    "episodes_app": {"sessions_app", "ethan_llm", "embedder", "ethan_shared"},
    "agent_app": {
        "sessions_app",
        "memory_app",
        "profile_app",
        "episodes_app",
        "ethan_llm",
        "embedder",
        "ethan_shared",
    },
    # Ethan as an OAuth authorization server (remote MCP hosts): on Django and
    # django-oauth-toolkit alone; the MCP door and the memory page use it.
    "oauth_app": {"ethan_shared"},
    # The doors: thin adapters above the turn (channels_app/); nothing below imports them.
    "channels_app": {
        "agent_app",
        "oauth_app",
        "sessions_app",
        "memory_app",
        "profile_app",
        "episodes_app",
        "ethan_llm",
        "embedder",
        "ethan_shared",
    },
}


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_that_run(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that can run: all but those under `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (imports_that_run)."""
    modules = project_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in imports_that_run(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            for alias in node.names:
                # `from memory_app import services` imports the module memory_app.services.
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in modules else base)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def layer(module: str) -> str:
    return module.split(".")[0]


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return [_cycle_in(graph, set(component)) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A concrete cycle through the component's first module (breadth-first, shortest)."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & component):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    return sorted(component)  # unreachable: a strongly connected component has a cycle


def test_the_graph_sees_the_project():
    graph = import_graph()
    assert "agent_app.turn" in graph and "memory_app.tasks" in graph
    assert "sessions_app.services" in graph["agent_app.turn"]
    assert "memory_app.tasks" in graph["agent_app.turn"]


def test_imports_inside_functions_count_and_type_checking_does_not():
    tree = ast.parse(
        "import a\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import b\nelse:\n    import c\n"
        "try:\n    import d\nexcept ImportError:\n    pass\n"
        "class K:\n    import e\n    def m(self):\n        import f\n"
        "def g():\n    import h\n"
    )
    names = {
        alias.name
        for node in imports_that_run(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert names == {"a", "c", "d", "e", "f", "h"}


def test_find_cycles_reports_one():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_imports_point_one_way():
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if layer(module) in ALLOWED
        for target in targets
        if layer(target) != layer(module) and layer(target) not in ALLOWED[layer(module)]
    )
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)
